"""torch_xla-like API for training scripts: ``import emulator.xla as xm`` instead of
``import torch_xla.core.xla_model as xm``.

``xla_device()`` attaches the process to the emulated instance and claims its NeuronCores
(see :mod:`emulator.runtime.attach`). torch is imported only when a device is asked for, so
``import emulator.xla`` stays cheap.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from emulator.runtime.attach import NeuronRuntimeError, attach, current_session

if TYPE_CHECKING:
    import torch

__all__ = [
    "NeuronRuntimeError",
    "get_local_ordinal",
    "get_ordinal",
    "is_master_ordinal",
    "xla_device",
    "xrt_world_size",
]


def xla_device(n: int | None = None, devkind: str | None = None) -> torch.device:
    """Attach to the emulated instance (once) and return the device tensors should live on.

    Raises :class:`NeuronRuntimeError` when the cores cannot be claimed or no daemon runs.
    Tensors are ordinary CPU tensors in this release; capture of the work they do on the
    NeuronCores arrives with the cost model.
    """
    import torch

    attach()
    return torch.device("cpu")


def neuroncores() -> tuple[int, ...]:
    """Global ids of the NeuronCores this process owns (empty before :func:`xla_device`)."""
    session = current_session()
    return session.neuroncores if session else ()


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip().isdigit() else default


def get_ordinal() -> int:
    """Global rank of this process (``RANK`` under torchrun, else 0)."""
    return _env_int("RANK", 0)


def get_local_ordinal() -> int:
    return _env_int("LOCAL_RANK", 0)


def xrt_world_size() -> int:
    """Number of processes in the job (``WORLD_SIZE`` under torchrun, else 1)."""
    return _env_int("WORLD_SIZE", 1)


def is_master_ordinal(local: bool = True) -> bool:
    return (get_local_ordinal() if local else get_ordinal()) == 0
