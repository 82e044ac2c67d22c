"""The top level of ``torch_xla`` (2.x): ``torch_xla.device()``, ``sync()``, ``launch()``."""

from __future__ import annotations

import torch

from emulator.compat import xla_model
from emulator.compat.spawn import launch

# Versions the packages report: the PyTorch underneath, marked as the emulator's (PEP 440 local
# version), so a script that prints or compares versions sees what it runs on.
__version__ = f"{torch.__version__.split('+')[0]}+neuron.emulated"
NEURONX_VERSION = __version__


def device(index: int | None = None) -> torch.device:
    return xla_model.xla_device(index)


def devices() -> list[torch.device]:
    return [xla_model.xla_device()]


def sync(wait: bool = False, reset_scope: bool = True) -> None:
    xla_model.mark_step(wait)


__all__ = ["NEURONX_VERSION", "__version__", "device", "devices", "launch", "sync"]
