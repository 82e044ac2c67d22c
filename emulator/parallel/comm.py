"""Collectives as the model code calls them, and where they go.

Model code (tensor-parallel layers, the data-parallel gradient reduction, pipeline sends) calls
:func:`all_reduce`, :func:`all_gather`, :func:`reduce_scatter` and :func:`send` with the name of a
replica group (``"tp"``, ``"dp"``, ``"pp"``); the active :class:`Communicator` — whose
:class:`~emulator.parallel.ranks.ParallelState` is this rank's view of the job's rank grid —
decides what that means:

- :class:`RecordingCommunicator` (model-scale tracing on ``meta``): the result is a new buffer of
  the right shape (no values: meta tensors have none), and a :class:`CollectiveCall` is kept for
  the cost model, which later maps the group name onto each rank's concrete NeuronCores
  (``emulator.parallel.ranks``).
- the real-valued communicator of a user's neuronx-distributed script
  (``emulator.compat.nxd_state``): the collective is done between the processes, on the values.
- no communicator, or a group of size 1: the identity (a single rank needs no collective).

A collective's byte count is sized as nccom-test sizes it (``emulator/costmodel/collectives.py``):
all-reduce the buffer, all-gather the gathered output, reduce-scatter the input, send the message.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import torch

from emulator.capture.tensor import unwrap
from emulator.parallel.ranks import ParallelState


@dataclass(frozen=True)
class CollectiveCall:
    kind: str  # all_reduce, all_gather, reduce_scatter, send
    group: str  # tp, dp, pp
    nbytes: int  # sized as nccom-test sizes it (see module docstring)
    # ops captured in the graph before it (its place in the profile's timeline), and before the op
    # that first needs its result (None: the next op; see overlapped()); not part of what the call
    # is: equal calls cost the same wherever they sit (emulator/parallel/job.py)
    after_op: int = field(default=-1, compare=False)
    wait_op: int | None = field(default=None, compare=False)


class Communicator(Protocol):
    """Does the collectives of groups of more than one rank; results are new tensors."""

    state: ParallelState

    def all_reduce(self, t: torch.Tensor, group: str, op: str) -> torch.Tensor: ...

    def all_gather(self, t: torch.Tensor, dim: int, group: str) -> torch.Tensor: ...

    def reduce_scatter(self, t: torch.Tensor, dim: int, group: str) -> torch.Tensor: ...

    def send(self, t: torch.Tensor, group: str) -> None: ...


@dataclass
class RecordingCommunicator:
    """Keeps every collective the traced code asks for (model-scale work: no values to move)."""

    state: ParallelState
    calls: list[CollectiveCall] = field(default_factory=list)
    position: Callable[[], int] = lambda: -1  # ops captured so far in the current graph
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # the calls of each open overlapped() block, as (graph number, index in that graph's calls)
    _open: list[list[tuple[int, int]]] = field(default_factory=list, repr=False)
    _graph: int = field(default=0, repr=False)  # graphs taken so far

    def collective(self, kind: str, group: str, tensor: torch.Tensor, nbytes: int) -> None:
        with self._lock:  # backward runs on autograd's thread
            if self._open:
                self._open[-1].append((self._graph, len(self.calls)))
            self.calls.append(CollectiveCall(kind, group, nbytes, self.position()))

    def begin_overlap(self) -> None:
        with self._lock:
            self._open.append([])

    def end_overlap(self) -> None:
        """The calls of the innermost block are first needed here, after the ops captured in it (a
        call whose graph was cut inside the block stays waited for at once: the conservative case)."""
        with self._lock:
            here = self.position()
            for graph, i in self._open.pop():
                if graph == self._graph:
                    self.calls[i] = dataclasses.replace(self.calls[i], wait_op=here)

    def all_reduce(self, t: torch.Tensor, group: str, op: str) -> torch.Tensor:
        self.collective("all_reduce", group, t, _nbytes(t))
        return t

    def all_gather(self, t: torch.Tensor, dim: int, group: str) -> torch.Tensor:
        shape = list(t.shape)
        shape[dim] *= self.state.size(group)
        out = t.new_empty(shape)  # the gathered buffer (an allocation, no device op)
        self.collective("all_gather", group, t, _nbytes(out))
        return out

    def reduce_scatter(self, t: torch.Tensor, dim: int, group: str) -> torch.Tensor:
        self.collective("reduce_scatter", group, t, _nbytes(t))
        shape = list(t.shape)
        shape[dim] //= self.state.size(group)
        return t.new_empty(shape)

    def send(self, t: torch.Tensor, group: str) -> None:
        self.collective("send", group, t, _nbytes(t))

    def take(self) -> list[CollectiveCall]:
        with self._lock:
            calls, self.calls = self.calls, []
            self._graph += 1
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


def _active_for(group: str) -> Communicator | None:
    """The communicator, or None when the group has one rank (nothing to do)."""
    comm = _active[0]
    return None if comm is None or comm.state.size(group) == 1 else comm


def all_reduce(t: torch.Tensor, group: str, op: str = "sum") -> torch.Tensor:
    """Reduce over the group (``op``: sum or max; same shape), as a new tensor."""
    comm = _active_for(group)
    return t if comm is None else comm.all_reduce(t, group, op)


def all_gather(t: torch.Tensor, dim: int, group: str) -> torch.Tensor:
    """Concatenate the group's tensors along ``dim`` (``size(dim) * n``)."""
    comm = _active_for(group)
    return t if comm is None else comm.all_gather(t, dim, group)


def reduce_scatter(t: torch.Tensor, dim: int, group: str) -> torch.Tensor:
    """Sum over the group, each rank keeps its ``1/n`` slice along ``dim``."""
    comm = _active_for(group)
    if comm is None:
        return t
    n = comm.state.size(group)
    if t.shape[dim] % n:
        raise ValueError(f"reduce_scatter: dimension {dim} of size {t.shape[dim]} does not split over {n} ranks")
    return comm.reduce_scatter(t, dim, group)


@contextmanager
def overlapped() -> Iterator[None]:
    """Collectives called inside the block run while the ops after them inside it do: their
    results are first needed after the block — Megatron's asynchronous collectives (``async_op=True``,
    the handle waited for later; docs/parallel.md §Collectives and compute). Only the recording
    communicator notes it (the cost model hides the collective behind those ops); one that
    computes real values has them at once."""
    comm = _active[0]
    if not isinstance(comm, RecordingCommunicator):
        yield
        return
    comm.begin_overlap()
    try:
        yield
    finally:
        comm.end_overlap()


def send(t: torch.Tensor, group: str = "pp") -> None:
    """Point-to-point send to the next (or previous) pipeline stage."""
    comm = _active_for(group)
    if comm is not None:
        comm.send(t, group)
