"""Test helper: tensor-parallel ranks as threads of one process, with a real all-reduce."""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from emulator.parallel.comm import ParallelState


class ThreadedAllReduce:
    """A communicator for ``tp`` threads, one per rank: :attr:`state` is the calling thread's,
    and an all-reduce sums the ranks' tensors in place. The other collectives are refused: the
    comm API hands them no output buffer to fill, so they cannot carry values here."""

    def __init__(self, tp: int) -> None:
        self.tp = tp
        self._local = threading.local()
        self._barrier = threading.Barrier(tp)
        self._slots: list[torch.Tensor | None] = [None] * tp
        self.kinds: list[str] = []

    @property
    def state(self) -> ParallelState:
        return ParallelState(tp=self.tp, tp_rank=self._local.rank)

    def collective(self, kind: str, group: str, tensor: torch.Tensor, nbytes: int) -> None:
        assert kind == "all_reduce" and group == "tp", (kind, group)
        rank = self._local.rank
        self._slots[rank] = tensor.detach().clone()
        self._barrier.wait()
        total = sum(self._slots)  # type: ignore[arg-type]
        self._barrier.wait()
        with torch.no_grad():
            tensor.copy_(total)
        if rank == 0:
            self.kinds.append(kind)

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
