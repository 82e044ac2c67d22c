"""Collectives as the model code calls them, and where they go.

Model code (tensor-parallel layers, the data-parallel gradient reduction, pipeline sends) calls
:func:`all_reduce`, :func:`all_gather`, :func:`reduce_scatter` and :func:`send` with the name of a
replica group (``"tp"``, ``"dp"``, ``"pp"``); the active :class:`Communicator` decides what that
means:

- :class:`RecordingCommunicator` (model-scale tracing on ``meta``): the result is a new buffer of
  the right shape (no values: meta tensors have none), and a :class:`CollectiveCall` is kept for
  the cost model, which later maps the group name onto each rank's concrete NeuronCores
  (``emulator.parallel.plan``). Real-valued collectives between processes are not done here yet.
- no communicator, or a group of size 1: the identity (a single rank needs no collective).

A collective's byte count is sized as nccom-test sizes it (``emulator/costmodel/collectives.py``):
all-reduce the buffer, all-gather the gathered output, reduce-scatter the input, send the message.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol

import torch

from emulator.capture.tensor import unwrap

GROUPS = ("tp", "dp", "pp")


@dataclass(frozen=True)
class ParallelState:
    """This rank's place in the job: group sizes and its index in each (Megatron's parallel_state)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    tp_rank: int = 0
    pp_rank: int = 0
    dp_rank: int = 0
    sequence_parallel: bool = False

    def size(self, group: str) -> int:
        return {"tp": self.tp, "pp": self.pp, "dp": self.dp}[group]

    @property
    def first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def last_stage(self) -> bool:
        return self.pp_rank == self.pp - 1


@dataclass(frozen=True)
class CollectiveCall:
    kind: str  # all_reduce, all_gather, reduce_scatter, send
    group: str  # tp, dp, pp
    nbytes: int  # sized as nccom-test sizes it (see module docstring)


class Communicator(Protocol):
    state: ParallelState

    def collective(self, kind: str, group: str, tensor: torch.Tensor, nbytes: int) -> None: ...


@dataclass
class RecordingCommunicator:
    """Keeps every collective the traced code asks for (model-scale work: no values to move)."""

    state: ParallelState
    calls: list[CollectiveCall] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def collective(self, kind: str, group: str, tensor: torch.Tensor, nbytes: int) -> None:
        with self._lock:  # backward runs on autograd's thread
            self.calls.append(CollectiveCall(kind, group, nbytes))

    def take(self) -> list[CollectiveCall]:
        with self._lock:
            calls, self.calls = self.calls, []
        return calls


_active: list[Communicator | None] = [None]


def set_communicator(comm: Communicator | None) -> None:
    _active[0] = comm


def communicator() -> Communicator | None:
    return _active[0]


def state() -> ParallelState:
    comm = _active[0]
    return comm.state if comm is not None else ParallelState()


def _nbytes(t: torch.Tensor) -> int:
    inner = unwrap(t)
    return inner.numel() * inner.element_size()


def _record(kind: str, group: str, t: torch.Tensor, nbytes: int) -> bool:
    """Hand the call to the communicator; False when the group has one rank (nothing to do)."""
    comm = _active[0]
    if comm is None or comm.state.size(group) == 1:
        return False
    comm.collective(kind, group, t, nbytes)
    return True


def all_reduce(t: torch.Tensor, group: str) -> torch.Tensor:
    """Sum over the group (same shape)."""
    _record("all_reduce", group, t, _nbytes(t))
    return t


def all_gather(t: torch.Tensor, dim: int, group: str) -> torch.Tensor:
    """Concatenate the group's tensors along ``dim`` (``size(dim) * n``)."""
    n = state().size(group)
    if n == 1:
        return t
    shape = list(t.shape)
    shape[dim] *= n
    out = t.new_empty(shape)  # the gathered buffer (an allocation, no device op); values: see below
    _record("all_gather", group, t, _nbytes(out))
    return out


def reduce_scatter(t: torch.Tensor, dim: int, group: str) -> torch.Tensor:
    """Sum over the group, each rank keeps its ``1/n`` slice along ``dim``."""
    n = state().size(group)
    if n == 1:
        return t
    if t.shape[dim] % n:
        raise ValueError(f"reduce_scatter: dimension {dim} of size {t.shape[dim]} does not split over {n} ranks")
    _record("reduce_scatter", group, t, _nbytes(t))
    shape = list(t.shape)
    shape[dim] //= n
    return t.new_empty(shape)


def send(t: torch.Tensor, group: str = "pp") -> None:
    """Point-to-point send to the next (or previous) pipeline stage."""
    _record("send", group, t, _nbytes(t))
