"""Where the ranks of a job run: each rank's NeuronCore as a global id, exchanged through the job's store.

Every collective is costed on the NeuronCores of its replica group (docs/collectives.md). A rank
knows its own core (the runtime session's first NeuronCore) and its node: torchrun numbers ranks
node by node, so rank ``r`` runs on node ``r // LOCAL_WORLD_SIZE``. Its global id is
``node * cores-per-node + core``, as the topology numbers cores (``emulator/costmodel/torus.py``).

Each rank publishes its id in the job's key-value store (``neuron-emulator/core/<rank>``) at its
first collective, and reads the others' ids there, each once. Every member of a group records
the group's collectives, so a rank waits at most until its peers finish the same collective. A
rank that has no device yet publishes ``-1``: it holds no NeuronCore, and a group is costed on
the cores of its members that have one (its id is read again at the group's next collective).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

_KEY = "neuron-emulator/core/"
NO_CORE = -1


class Store(Protocol):
    """The part of a ``torch.distributed.Store`` the exchange uses."""

    def set(self, key: str, value: str) -> None: ...

    def get(self, key: str) -> bytes: ...


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name, "").strip()
    return int(text) if text.isdigit() else default


def job_rank(env: Mapping[str, str] | None = None) -> int:
    """This process's global rank (torchrun's ``RANK``; 0 outside a job)."""
    return _env_int(os.environ if env is None else env, "RANK", 0)


def node_of(rank: int, env: Mapping[str, str] | None = None) -> int:
    """The node global ``rank`` runs on: ``rank // LOCAL_WORLD_SIZE`` (torchrun numbers ranks node by node)."""
    env = os.environ if env is None else env
    per_node = max(1, _env_int(env, "LOCAL_WORLD_SIZE", _env_int(env, "WORLD_SIZE", 1)))
    return rank // per_node


def global_core(node: int, core: int, cores_per_node: int) -> int:
    """The topology's id of ``core`` of ``node``."""
    return node * cores_per_node + core


class Placement:
    """This process's knowledge of the global NeuronCore of each rank of its job."""

    def __init__(self) -> None:
        self._known: dict[int, int] = {}
        self._published: dict[int, int] = {}  # id(store) -> the value this rank published there

    def publish(self, store: Store, rank: int, core: int | None) -> None:
        """Make this rank's core (None: no device yet) known in ``store`` (once per value)."""
        value = NO_CORE if core is None else core
        if self._published.get(id(store)) != value:
            store.set(f"{_KEY}{rank}", str(value))
            self._published[id(store)] = value
        if core is not None:
            self._known[rank] = core

    def cores(self, store: Store, ranks: Iterable[int]) -> tuple[int, ...]:
        """The global cores of ``ranks``, in their order (members without a device left out);
        blocks until each rank has published in ``store``."""
        out: list[int] = []
        for rank in ranks:
            core = self._known.get(rank)
            if core is None:
                core = int(store.get(f"{_KEY}{rank}"))
                if core == NO_CORE:
                    continue
                self._known[rank] = core
            out.append(core)
        return tuple(out)

    def groups(self, store: Store, groups: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
        """:meth:`cores` of each group."""
        return tuple(self.cores(store, g) for g in groups)


_by_pid: dict[int, Placement] = {}


def this_process() -> Placement:
    """The placement this process knows (a forked child starts afresh)."""
    return _by_pid.setdefault(os.getpid(), Placement())
