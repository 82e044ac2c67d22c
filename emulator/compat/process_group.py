"""The ``xla`` backend of torch.distributed: ``init_process_group('xla')`` after
``import torch_xla.distributed.xla_backend``.

:class:`ProcessGroupXla` is a :class:`torch.distributed.ProcessGroup` written in Python, as
torch_xla's is. Each collective runs on a gloo group made from the store torch.distributed hands
the backend, on host tensors over the device tensors' memory, and is recorded for the step like
every other collective (:mod:`emulator.compat.collectives`). Collectives complete before the call
returns; the ``Work`` handed back is already done.

The ``xla://`` init method reads what torchrun or ``xmp.spawn`` put in the environment
(``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``), as ``env://`` does.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup

from emulator.compat import collectives, world
from emulator.compat.gaps import NotEmulatedError


def _done(result: Any = None) -> dist.Work:
    future: torch.futures.Future = torch.futures.Future()
    future.set_result(result)
    return torch._C._distributed_c10d._create_work_from_future(future)  # type: ignore[attr-defined]


def _not_emulated(what: str) -> Callable[..., dist.Work]:
    """A method of the process group that raises ``NotEmulatedError`` naming ``what``."""

    def method(self: ProcessGroup, *args: Any, **kwargs: Any) -> dist.Work:
        raise NotEmulatedError(f"{what} on the xla backend")

    return method


class ProcessGroupXla(ProcessGroup):
    """Collectives of the ``xla`` backend over gloo; ``ranks`` are the members' global ranks."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: datetime.timedelta, ranks: Sequence[int]):
        super().__init__(rank, size)  # type: ignore[call-arg]  # the (rank, size) overload, missing from the stubs
        self._ranks = tuple(ranks) if ranks else tuple(range(size))
        # typed Any: torch's stubs do not declare a Backend's collectives
        self._gloo: Any = dist.ProcessGroupGloo(store, rank, size, timeout)
        self._group = collectives.Group(self._ranks, self._gloo, rank)

    def getBackendName(self) -> str:
        return "xla"

    def name(self) -> str:
        return "xla"

    def _wait(self, work: dist.Work, what: str) -> None:
        collectives.wait(work, what)

    def _hosts(
        self, tensors: Sequence[torch.Tensor]
    ) -> tuple[list[torch.Tensor], list[tuple[torch.Tensor, torch.Tensor]]]:
        """Contiguous host tensors for gloo, and the (host alias, buffer) pairs to copy back."""
        bufs, back = [], []
        for t in tensors:
            h = collectives.host(t)
            if h.is_contiguous():
                bufs.append(h)
            else:
                buf = h.contiguous()
                bufs.append(buf)
                back.append((h, buf))
        return bufs, back

    @staticmethod
    def _copy_back(back: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        for h, buf in back:
            h.copy_(buf)

    def _record(self, kind: str, size: int) -> None:
        collectives.record(kind, size, self._ranks)

    # -- collectives -------------------------------------------------------------------------
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:  # type: ignore[override]
        if not isinstance(opts, dist.AllreduceOptions):  # dist.all_reduce passes options; a ReduceOp is allowed too
            op = opts if opts is not None else dist.ReduceOp.SUM
            opts = dist.AllreduceOptions()
            opts.reduceOp = op
        # one gloo call per tensor: a list given to gloo at once means one buffer per device, summed together
        for t in tensors:
            self._group.in_place(t, lambda bufs: self._gloo.allreduce(bufs, opts), "an all-reduce")
        self._record("all_reduce", sum(collectives.nbytes(t) for t in tensors))
        return _done(tensors)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        options = dist.AllreduceOptions()
        if opts is not None:
            options.reduceOp = opts.reduceOp
        return self.allreduce(tensors, options)

    def allgather(  # type: ignore[override]
        self, output_lists: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None
    ) -> dist.Work:
        for outs, inp in zip(output_lists, inputs, strict=True):
            out_bufs, back = self._hosts(outs)
            src = collectives.host(inp).contiguous()
            self._wait(self._gloo.allgather([out_bufs], [src]), "an all-gather")
            self._copy_back(back)
            self._record("all_gather", sum(collectives.nbytes(o) for o in outs))
        return _done(output_lists)

    def _allgather_base(self, output: torch.Tensor, inp: torch.Tensor, opts: Any = None) -> dist.Work:
        chunks = list(output.chunk(self.size()))
        return self.allgather([chunks], [inp])

    def allgather_into_tensor_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> dist.Work:
        for out, inp in zip(outputs, inputs, strict=True):
            self._allgather_base(out, inp)
        return _done(outputs)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:  # type: ignore[override]
        options = dist.BroadcastOptions()
        options.rootRank = opts.rootRank if opts is not None else 0
        for t in tensors:
            self._group.in_place(t, lambda bufs: self._gloo.broadcast(bufs, options), "a broadcast")
        self._record("broadcast", sum(collectives.nbytes(t) for t in tensors))
        return _done(tensors)

    def reduce_scatter(  # type: ignore[override]
        self, outputs: list[torch.Tensor], input_lists: list[list[torch.Tensor]], opts: Any = None
    ) -> dist.Work:
        options = dist.ReduceScatterOptions()
        if opts is not None:
            options.reduceOp = opts.reduceOp
        for out, ins in zip(outputs, input_lists, strict=True):
            out_bufs, back = self._hosts([out])
            in_bufs = [collectives.host(i).contiguous() for i in ins]
            self._wait(self._gloo.reduce_scatter(out_bufs, [in_bufs], options), "a reduce-scatter")
            self._copy_back(back)
            self._record("reduce_scatter", sum(collectives.nbytes(i) for i in ins))
        return _done(outputs)

    def _reduce_scatter_base(self, output: torch.Tensor, inp: torch.Tensor, opts: Any = None) -> dist.Work:
        return self.reduce_scatter([output], [list(inp.chunk(self.size()))], opts)

    def reduce_scatter_tensor_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> dist.Work:
        for out, inp in zip(outputs, inputs, strict=True):
            self._reduce_scatter_base(out, inp, opts)
        return _done(outputs)

    def barrier(self, opts: Any = None) -> dist.Work:
        self._wait(self._gloo.barrier(dist.BarrierOptions()), "a barrier")
        return _done()

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> dist.Work:
        bufs, _ = self._hosts(tensors)
        self._wait(self._gloo.send(bufs, dst, tag), "a send")
        # one transfer of the message, from this rank's core to dst's
        collectives.record(
            "send", sum(collectives.nbytes(t) for t in tensors), (self._ranks[self.rank()], self._ranks[dst])
        )
        return _done()

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> dist.Work:
        bufs, back = self._hosts(tensors)
        self._wait(self._gloo.recv(bufs, src, tag), "a receive")
        self._copy_back(back)
        return _done(tensors)

    # what the emulator's xla process group does not do: a clear error, not the base class's
    alltoall = _not_emulated("torch.distributed.all_to_all")
    alltoall_base = _not_emulated("torch.distributed.all_to_all_single")
    gather = _not_emulated("torch.distributed.gather")
    scatter = _not_emulated("torch.distributed.scatter")
    reduce = _not_emulated("torch.distributed.reduce")
    recv_anysource = _not_emulated("torch.distributed.recv without a source")


def _create(options: Any, backend_options: Any = None) -> ProcessGroupXla:
    return ProcessGroupXla(
        options.store, options.group_rank, options.group_size, options.timeout, list(options.global_ranks_in_group)
    )


def _xla_rendezvous(url: str, timeout: datetime.timedelta = datetime.timedelta(seconds=300), **kwargs: Any) -> Iterator:
    """``init_method='xla://'``: the job's store, rank and world size from the environment."""
    rank, size = world.global_rank(), world.world_size()
    store = collectives.job_store() if size > 1 else dist.HashStore()
    yield (store, rank, size)


_registered = False


def register() -> None:
    """Make ``xla`` a torch.distributed backend, ``xla://`` and ``pjrt://`` (torch_xla's PJRT
    name for the same rendezvous, ``torch_xla.experimental.pjrt_backend``) init methods (once)."""
    global _registered
    if _registered:
        return
    dist.Backend.register_backend("xla", _create, extended_api=True, devices=["xla"])
    dist.register_rendezvous_handler("xla", _xla_rendezvous)
    dist.register_rendezvous_handler("pjrt", _xla_rendezvous)
    _registered = True
