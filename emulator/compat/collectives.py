"""Collectives between the ranks of a job: done for real on the values, costed on the emulated links.

Every collective a script asks for — ``xm.all_reduce``, a ``torch.distributed`` call on the
``xla`` process group, a neuronx-distributed tensor-parallel layer — ends here. The values move
between the processes through gloo (PyTorch's CPU collectives library), on host tensors over the
device tensors' memory: no device op is recorded for the data movement. Instead the collective is
recorded for the step (:func:`record`) with its group's global ranks: the ranks' NeuronCores
are exchanged through the job's store (``emulator/runtime/placement.py``), and at ``mark_step``
the one collective model prices it on those cores' ring — NeuronLink, or EFA for a group spanning
instances — as it prices a replayed plan's (docs/collectives.md); the daemon counts its bytes
per link. Sizes follow nccom-test: all-reduce and broadcast the buffer, all-gather the gathered
output, reduce-scatter the input; a point-to-point send is one transfer of the message.

Groups here are private to the emulator (like the PJRT runtime's own communicators under
torch_xla): each is a gloo group over the job's store — torchrun's agent store, or the one
``xmp.spawn`` hosts — under a key of its own, so they never disturb ``init_process_group``.
"""

from __future__ import annotations

import datetime
import os
import pickle
import threading
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from emulator.capture import native
from emulator.compat import world
from emulator.runtime.collectives import collective_error, collective_timeout
from emulator.runtime.errors import NeuronRuntimeError
from emulator.runtime.placement import this_process

# torch_xla's reduce types (xm.REDUCE_SUM, ...) and their gloo reductions
REDUCE_OPS: dict[str, Any] = {
    "sum": dist.ReduceOp.SUM,
    "mul": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
    "and": dist.ReduceOp.BAND,
    "or": dist.ReduceOp.BOR,
}


def reduce_op(name: str) -> Any:
    try:
        return REDUCE_OPS[name]
    except KeyError:
        raise ValueError(f"unknown reduce type {name!r}; known: {', '.join(REDUCE_OPS)}") from None


# -- values --------------------------------------------------------------------------------------
def host(t: torch.Tensor) -> torch.Tensor:
    """A host tensor over ``t``'s memory (``t`` itself on the CPU): writes reach ``t``."""
    if t.device.type == native.DEVICE.type:
        return native.host_view(t)
    if t.device.type == "cpu":
        return t
    raise ValueError(f"a collective on a tensor on {t.device} (the emulator moves xla and cpu tensors)")


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def record(kind: str, size: int, ranks: Sequence[int], concurrent: Sequence[Sequence[int]] = ()) -> None:
    """Count the collective of global ``ranks`` in this process's step (``concurrent``: the other
    groups doing it at the same time). A process without a device yet counts nothing, but says
    so to its peers, which wait for each member's core (emulator/runtime/placement.py)."""
    if len(ranks) < 2:
        return
    from emulator.xla import active_runtime

    runtime = active_runtime()
    if runtime is not None:
        runtime.record_collective(kind, size, job_store(), ranks, concurrent)
    else:
        this_process().publish(job_store(), world.global_rank(), None)


def wait(work: dist.Work, what: str) -> None:
    """Wait for a gloo collective; a peer gone or stuck is one NeuronRuntimeError (docs/lifecycle.md)."""
    try:
        work.wait()
    except RuntimeError as exc:
        raise collective_error(exc, what, rank=world.global_rank(), timeout=collective_timeout()) from None


# -- groups --------------------------------------------------------------------------------------
class Group:
    """Global ``ranks`` talking over one gloo group; this process is ``ranks[index]``. ``siblings``
    are the other groups of its family (replica groups) that run the same collectives at the same
    time: they share the links with it (docs/collectives.md)."""

    def __init__(
        self, ranks: tuple[int, ...], backend: Any, index: int, siblings: tuple[tuple[int, ...], ...] = ()
    ) -> None:
        self.ranks = ranks
        # a dist.ProcessGroupGloo, typed Any: torch's stubs do not declare a Backend's collectives
        self.backend = backend  # None: a group of one rank
        self.index = index
        self.siblings = siblings

    def _record(self, kind: str, size: int) -> None:
        record(kind, size, self.ranks, self.siblings)

    @property
    def size(self) -> int:
        return len(self.ranks)

    def _wait(self, work: dist.Work, what: str) -> None:
        wait(work, what)

    def in_place(self, t: torch.Tensor, start: Any, what: str) -> torch.Tensor:
        """``start([buffer])`` — a gloo call — on a contiguous host buffer of ``t``, its result
        written back into ``t``; returns ``t``'s host alias."""
        h = host(t)
        if self.backend is not None:
            buf = h if h.is_contiguous() else h.contiguous()
            self._wait(start([buf]), what)
            if buf is not h:
                h.copy_(buf)
        return h

    def all_reduce_(self, tensors: Sequence[torch.Tensor], op: str = "sum", scale: float = 1.0) -> None:
        """Reduce each tensor over the group in place, then multiply by ``scale``."""
        opts = dist.AllreduceOptions()
        opts.reduceOp = reduce_op(op)
        for t in tensors:
            h = self.in_place(t, lambda bufs: self.backend.allreduce(bufs, opts), "an all-reduce")
            if scale != 1.0:
                h.mul_(scale)
        self._record("all_reduce", sum(nbytes(t) for t in tensors))

    def all_reduce(self, t: torch.Tensor, op: str = "sum", scale: float = 1.0) -> torch.Tensor:
        """A new tensor: ``t`` reduced over the group (``t`` is left as it was)."""
        out = torch.empty(t.shape, dtype=t.dtype, device=t.device)
        host(out).copy_(host(t))
        self.all_reduce_([out], op, scale)
        return out

    def all_gather(self, t: torch.Tensor, dim: int = 0) -> torch.Tensor:
        """The group's tensors concatenated along ``dim``, in group order (a new tensor)."""
        n = self.size
        stacked = torch.empty((n, *t.shape), dtype=t.dtype, device=t.device)
        h = host(stacked)
        if self.backend is None:
            h[0].copy_(host(t))
        else:
            src = host(t).contiguous()
            self._wait(self.backend.allgather([list(h.unbind(0))], [src]), "an all-gather")
        self._record("all_gather", nbytes(stacked))
        dim = dim % max(t.dim(), 1)
        if dim == 0:
            return stacked.reshape(n * t.shape[0], *t.shape[1:]) if t.dim() else stacked
        shape = list(t.shape)
        shape[dim] *= n
        out = torch.empty(shape, dtype=t.dtype, device=t.device)
        host(out).copy_(torch.cat(list(h.unbind(0)), dim))
        return out

    def reduce_scatter(self, t: torch.Tensor, dim: int = 0, op: str = "sum", scale: float = 1.0) -> torch.Tensor:
        """Reduce over the group; this rank keeps its ``1/n`` slice along ``dim`` (a new tensor)."""
        n = self.size
        if t.shape[dim] % n:
            raise ValueError(f"reduce_scatter: dimension {dim} of size {t.shape[dim]} does not split over {n} ranks")
        full = host(t).clone()
        if self.backend is not None:
            opts = dist.AllreduceOptions()
            opts.reduceOp = reduce_op(op)
            self._wait(self.backend.allreduce([full], opts), "a reduce-scatter")
        part = full.narrow(dim, self.index * (t.shape[dim] // n), t.shape[dim] // n)
        out = torch.empty(part.shape, dtype=t.dtype, device=t.device)
        host(out).copy_(part)
        if scale != 1.0:
            host(out).mul_(scale)
        self._record("reduce_scatter", nbytes(t))
        return out

    def broadcast_(self, tensors: Sequence[torch.Tensor], root_index: int = 0) -> None:
        opts = dist.BroadcastOptions()
        opts.rootRank = root_index
        for t in tensors:
            self.in_place(t, lambda bufs: self.backend.broadcast(bufs, opts), "a broadcast")
        self._record("broadcast", sum(nbytes(t) for t in tensors))

    def gather_objects(self, obj: object) -> list[object]:
        """Every rank's ``obj`` (picklable), in group order: a host exchange, not a device collective."""
        if self.backend is None:
            return [obj]
        payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in self.ranks]
        self._wait(self.backend.allgather([sizes], [torch.tensor([payload.numel()])]), "a rendezvous")
        longest = int(max(s.item() for s in sizes))
        padded = torch.zeros(longest, dtype=torch.uint8)
        padded[: payload.numel()] = payload
        outs = [torch.empty(longest, dtype=torch.uint8) for _ in self.ranks]
        self._wait(self.backend.allgather([outs], [padded]), "a rendezvous")
        return [pickle.loads(o[: int(s.item())].numpy().tobytes()) for o, s in zip(outs, sizes, strict=True)]

    def barrier(self) -> None:
        if self.backend is not None:
            self._wait(self.backend.barrier(dist.BarrierOptions()), "a barrier")


_lock = threading.Lock()
_backends: dict[tuple[int, tuple[int, ...]], Any] = {}
_groups: dict[tuple[int, tuple[int, ...], tuple[tuple[int, ...], ...]], Group] = {}
_store: list[dist.Store] = []


def job_store() -> dist.Store:
    """The job's key-value store: torchrun's agent store (the one ``xmp.spawn`` hosts too), or the
    default process group's. One line of NeuronRuntimeError when there is none."""
    if _store:
        return _store[0]
    timeout = datetime.timedelta(seconds=collective_timeout())
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
        port = int(os.environ.get("MASTER_PORT", "0") or 0)
        store: dist.Store = dist.TCPStore(addr, port, is_master=False, timeout=timeout, wait_for_workers=False)
    elif dist.is_available() and dist.is_initialized():
        store = dist.distributed_c10d._get_default_store()
    else:
        raise NeuronRuntimeError(
            "NRT_INVALID",
            f"rank {world.global_rank()} of {world.world_size()}: collectives between processes need the job's "
            "store: launch with torchrun or xmp.spawn, or call torch.distributed.init_process_group first",
        )
    _store.append(store)
    return store


def _backend(members: tuple[int, ...], me: int) -> Any:
    """The gloo group of ``members`` (None for one rank), made once per process; call under ``_lock``."""
    key = (os.getpid(), members)  # a forked child makes its own
    if key not in _backends:
        backend = None
        if len(members) > 1:
            prefix = "neuron-emulator/group/" + ",".join(map(str, members)) + "/"
            backend = dist.ProcessGroupGloo(
                dist.PrefixStore(prefix, job_store()),
                members.index(me),
                len(members),
                datetime.timedelta(seconds=collective_timeout()),
            )
        _backends[key] = backend
    return _backends[key]


def group(ranks: Sequence[int] | None = None, siblings: Sequence[Sequence[int]] = ()) -> Group:
    """This process's group among global ``ranks`` (every rank of the job when None). Every member
    must ask for the same group (as with torch_xla's replica groups): it is made on first use.
    ``siblings``: the groups running the same collectives at the same time (``ranks`` among them or not)."""
    members = tuple(range(world.world_size())) if ranks is None else tuple(int(r) for r in ranks)
    me = world.global_rank()
    if me not in members:
        raise ValueError(f"rank {me} is not in the group {list(members)}")
    others = tuple(g for g in (tuple(int(r) for r in s) for s in siblings) if sorted(g) != sorted(members))
    key = (os.getpid(), members, others)
    with _lock:
        found = _groups.get(key)
        if found is None:
            found = _groups[key] = Group(members, _backend(members, me), members.index(me), others)
    return found


def group_among(replica_groups: Sequence[Sequence[int]] | None) -> Group:
    """This rank's group among torch_xla-style replica groups (``[[0, 1], [2, 3]]``; None or
    ``[]``: every rank); the others run the same collective alongside it. Each group is made by its
    members only."""
    if not replica_groups:
        return group(None)
    me = world.global_rank()
    mine = [g for g in replica_groups if me in g]
    if len(mine) != 1:
        raise ValueError(f"rank {me} must be in exactly one of the replica groups {[list(g) for g in replica_groups]}")
    return group(mine[0], replica_groups)
