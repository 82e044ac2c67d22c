"""``torch_xla.runtime`` on the emulator: one process per NeuronCore, one device (``xla:0``) each.

Ordinals and counts come from torchrun's (or ``xmp.spawn``'s) environment
(:mod:`emulator.compat.world`); the device type is ``NEURON``. SPMD (one process driving many
cores through sharding annotations) is not emulated.
"""

from __future__ import annotations

from emulator.compat import world
from emulator.compat.gaps import NotEmulatedError
from emulator.compat.xla_model import DEVICE_HW

# torch_xla's names for where this process stands (emulator.compat.world): one process, one device
world_size = process_count = global_device_count = global_runtime_device_count = world.world_size
global_ordinal = process_index = world.global_rank
local_ordinal = world.local_rank
local_process_count = local_device_count = world.local_world_size  # this host's processes, one NeuronCore each


def host_index() -> int:
    """The instance this process runs on (torchrun numbers ranks node by node)."""
    return world.global_rank() // world.local_world_size()


def addressable_device_count() -> int:
    """Devices this process drives: its NeuronCore."""
    return 1


addressable_runtime_device_count = addressable_device_count


def device_type() -> str:
    return DEVICE_HW


def is_spmd() -> bool:
    return False


def use_spmd(auto: bool = False) -> None:
    raise NotEmulatedError("torch_xla.runtime.use_spmd", "SPMD sharding: the emulator runs one process per NeuronCore")
