"""``torch.xla``: the device module PyTorch looks up for device type ``xla`` (``getattr(torch,
"xla")``), e.g. activation checkpointing saving and restoring the device's random-number state
around a recomputed forward. The emulated device runs every op's CPU kernel on host memory
(emulator/capture/native), so its random numbers come from the CPU generator: that is the state
saved and restored here.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def _device(index: object = None) -> Iterator[None]:
    yield  # one device per process (xla:0): nothing to switch


def _module() -> types.ModuleType:
    module = types.ModuleType("torch.xla", __doc__)
    module.get_rng_state = lambda device="xla": torch.get_rng_state()  # type: ignore[attr-defined]
    module.set_rng_state = lambda state, device="xla": torch.set_rng_state(state)  # type: ignore[attr-defined]
    module.device = _device  # type: ignore[attr-defined]
    module.device_count = lambda: 1  # type: ignore[attr-defined]
    module.current_device = lambda: 0  # type: ignore[attr-defined]
    module.is_available = lambda: True  # type: ignore[attr-defined]
    return module


def register() -> None:
    """Make ``torch.xla`` the device module of ``xla`` (once; a real one already there stays)."""
    if not hasattr(torch, "xla"):
        torch._register_device_module("xla", _module())
