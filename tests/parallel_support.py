"""Test helper: tensor-parallel ranks as threads of one process, with a real all-reduce."""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from emulator.parallel.comm import ParallelState


class ThreadedAllReduce:
    """A communicator for ``tp`` threads, one per rank: :attr:`state` is the calling thread's,
    and an all-reduce returns the sum (or max) of the ranks' tensors. The other collectives are
    refused: this test's layers do not use them."""

    def __init__(self, tp: int) -> None:
        self.tp = tp
        self._local = threading.local()
        self._barrier = threading.Barrier(tp)
        self._slots: list[torch.Tensor | None] = [None] * tp
        self.kinds: list[str] = []

    @property
    def state(self) -> ParallelState:
        return ParallelState(tp=self.tp, tp_rank=self._local.rank)

    def all_reduce(self, tensor: torch.Tensor, group: str, op: str) -> torch.Tensor:
        assert group == "tp" and op in ("sum", "max"), (group, op)
        rank = self._local.rank
        self._slots[rank] = tensor.detach().clone()
        self._barrier.wait()
        slots = [t for t in self._slots if t is not None]
        total = torch.stack(slots).amax(0) if op == "max" else sum(slots)
        self._barrier.wait()
        if rank == 0:
            self.kinds.append("all_reduce")
        return total.to(tensor.dtype)  # type: ignore[union-attr]

    def all_gather(self, tensor: torch.Tensor, dim: int, group: str) -> torch.Tensor:
        raise AssertionError("all_gather is not used by this test")

    def reduce_scatter(self, tensor: torch.Tensor, dim: int, group: str) -> torch.Tensor:
        raise AssertionError("reduce_scatter is not used by this test")

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
