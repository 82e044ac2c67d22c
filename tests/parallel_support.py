"""Test helper: tensor-parallel ranks as threads of one process, with real collectives."""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from emulator.parallel.ranks import ParallelState, RankGrid


class ThreadedCommunicator:
    """A communicator for ``tp`` threads, one per rank: :attr:`state` is the calling thread's;
    all-reduce, all-gather and reduce-scatter move the ranks' values for real (sends are refused:
    these tests have no pipeline)."""

    def __init__(self, tp: int) -> None:
        self.tp = tp
        self._local = threading.local()
        self._barrier = threading.Barrier(tp)
        self._slots: list[torch.Tensor | None] = [None] * tp
        self.kinds: list[str] = []

    @property
    def state(self) -> ParallelState:
        return RankGrid(tp=self.tp).state(self._local.rank)

    def _exchange(self, tensor: torch.Tensor, group: str, kind: str) -> list[torch.Tensor]:
        """Every rank's ``tensor``, in rank order (each rank calls it with its own)."""
        assert group == "tp", group
        rank = self._local.rank
        self._slots[rank] = tensor.detach().clone()
        self._barrier.wait()
        slots = [t for t in self._slots if t is not None]
        self._barrier.wait()
        if rank == 0:
            self.kinds.append(kind)
        return slots

    def all_reduce(self, tensor: torch.Tensor, group: str, op: str) -> torch.Tensor:
        assert op in ("sum", "max"), op
        slots = self._exchange(tensor, group, "all_reduce")
        total = torch.stack(slots).amax(0) if op == "max" else torch.stack(slots).sum(0)
        return total.to(tensor.dtype)

    def all_gather(self, tensor: torch.Tensor, dim: int, group: str) -> torch.Tensor:
        return torch.cat(self._exchange(tensor, group, "all_gather"), dim)

    def reduce_scatter(self, tensor: torch.Tensor, dim: int, group: str) -> torch.Tensor:
        total = torch.stack(self._exchange(tensor, group, "reduce_scatter")).sum(0)
        return total.chunk(self.tp, dim)[self._local.rank].contiguous()

    def send(self, tensor: torch.Tensor, group: str) -> None:
        raise AssertionError("send is not used by this test")

    def run(self, fn: Callable[[int], object]) -> list:
        """``fn(rank)`` on every rank, each in its own thread; their results in rank order."""
        results: list = [None] * self.tp
        errors: list[BaseException] = []

        def target(rank: int) -> None:
            self._local.rank = rank
            try:
                results[rank] = fn(rank)
            except BaseException as exc:
                errors.append(exc)
                self._barrier.abort()

        threads = [threading.Thread(target=target, args=(r,)) for r in range(self.tp)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return results
