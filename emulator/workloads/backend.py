"""The device API a workload trains through: ``emulator.xla`` (torch_xla names), with local
stand-ins for the names it does not offer yet, and a plain-CPU variant for tests.

Contract used (torch_xla names): ``xla_device()``, ``mark_step()``, ``optimizer_step(opt)``,
``get_ordinal()``, ``xrt_world_size()``, ``neuroncores()``, ``last_step()`` -> an object with
``device_seconds``, ``wall_seconds``, ``flops``, ``compiled``, ``outcome``. Where ``emulator.xla``
lacks ``mark_step``/``optimizer_step``/``last_step``, :class:`XlaBackend` does what they would do
minus the simulation (gradient all-reduce + ``optimizer.step()``) and reports no device time.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist

from emulator.workloads.results import StepInfo


def all_reduce_gradients(optimizer: torch.optim.Optimizer) -> None:
    """Average the gradients over the ranks (what ``xm.optimizer_step`` does before stepping).

    Meta gradients (model-scale workloads) carry no values and are left alone here; the emulated
    runtime accounts their collective when its ``optimizer_step`` exists.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return
    grads = [
        p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None and not p.grad.is_meta
    ]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1).float() for g in grads])
    try:
        dist.all_reduce(flat)
    except RuntimeError as exc:  # a peer rank is gone or stuck (docs/lifecycle.md)
        from emulator.runtime.collectives import collective_error, collective_timeout

        raise collective_error(
            exc, "the gradient all-reduce", rank=dist.get_rank(), timeout=collective_timeout()
        ) from None
    flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value.isdigit() else default


class XlaBackend:
    """``emulator.xla`` as the training loop needs it."""

    attaches = True  # xla_device() registers the process with the daemon

    def __init__(self, xm: ModuleType | Any | None = None) -> None:
        if xm is None:
            import emulator.xla as default_xm

            xm = default_xm
        self.xm = xm

    def device(self) -> torch.device:
        return self.xm.xla_device()

    def rank(self) -> int:
        return int(self.xm.get_ordinal())

    def world_size(self) -> int:
        return int(self.xm.xrt_world_size())

    def neuroncores(self) -> tuple[int, ...]:
        fn = getattr(self.xm, "neuroncores", None)
        return tuple(fn()) if fn else ()

    def mark_step(self) -> None:
        fn = getattr(self.xm, "mark_step", None)
        if fn is not None:
            fn()

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        fn = getattr(self.xm, "optimizer_step", None)
        if fn is not None:
            fn(optimizer)
            return
        all_reduce_gradients(optimizer)
        optimizer.step()
        self.mark_step()

    def last_step(self) -> StepInfo | None:
        fn = getattr(self.xm, "last_step", None)
        info = fn() if fn is not None else None
        return None if info is None else StepInfo.from_xla(info)


class CpuBackend(XlaBackend):
    """Plain PyTorch on this host's CPU: no daemon, no emulated device (tests, debugging)."""

    attaches = False

    def __init__(self) -> None:
        self.xm = None

    def device(self) -> torch.device:
        return torch.device("cpu")

    def rank(self) -> int:
        return _env_int("RANK", 0)

    def world_size(self) -> int:
        return _env_int("WORLD_SIZE", 1)

    def neuroncores(self) -> tuple[int, ...]:
        return ()

    def mark_step(self) -> None:
        return None

    def last_step(self) -> StepInfo | None:
        return None
