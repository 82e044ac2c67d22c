"""``torch_xla.runtime`` on the emulator: one process per NeuronCore, one device (``xla:0``) each.

Ordinals and counts come from torchrun's (or ``xmp.spawn``'s) environment
(:mod:`emulator.compat.world`); the device type is ``NEURON``. SPMD (one process driving many
cores through sharding annotations) is not emulated.
"""

from __future__ import annotations

from emulator.compat import world
from emulator.compat.gaps import NotEmulatedError
from emulator.compat.xla_model import DEVICE_HW


def world_size() -> int:
    return world.world_size()


def global_ordinal() -> int:
    return world.global_rank()


def local_ordinal() -> int:
    return world.local_rank()


def process_index() -> int:
    return world.global_rank()


def process_count() -> int:
    return world.world_size()


def local_process_count() -> int:
    return world.local_world_size()


def host_index() -> int:
    """The instance this process runs on (torchrun numbers ranks node by node)."""
    return world.global_rank() // world.local_world_size()


def local_device_count() -> int:
    """Devices of this host's processes (one NeuronCore each)."""
    return world.local_world_size()


def addressable_device_count() -> int:
    """Devices this process drives: its NeuronCore."""
    return 1


def addressable_runtime_device_count() -> int:
    return 1


def global_device_count() -> int:
    return world.world_size()


def global_runtime_device_count() -> int:
    return world.world_size()


def device_type() -> str:
    return DEVICE_HW


def is_spmd() -> bool:
    return False


def use_spmd(auto: bool = False) -> None:
    raise NotEmulatedError("torch_xla.runtime.use_spmd", "SPMD sharding: the emulator runs one process per NeuronCore")
