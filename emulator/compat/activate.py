"""What ``import torch_xla`` does under the emulator: make device ``xla`` usable at once.

It loads the native device backend (which registers device ``xla`` with PyTorch) and asks it to
attach this process to the emulated instance at the first device allocation — so
``model.to('xla')`` works without ``xm.xla_device()`` first, and a process that only imports
torch_xla (the parent of ``xmp.spawn``) claims no NeuronCore. A first allocation that cannot
attach (no daemon, cores taken) fails with the runtime's error.
"""

from __future__ import annotations


def _first_use() -> None:
    from emulator.compat.xla_model import require_native

    require_native()


def install() -> None:
    from emulator.capture import native
    from emulator.compat.device_module import register

    register()  # torch.xla: the device's random-number state, for activation checkpointing
    module = native.backend()
    if module is not None:  # None: said on stderr; xla_device() then raises a clear error
        module.set_first_use(_first_use)
