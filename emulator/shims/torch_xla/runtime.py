"""torch_xla.runtime as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.runtime import (
    addressable_device_count,
    addressable_runtime_device_count,
    device_type,
    global_device_count,
    global_ordinal,
    global_runtime_device_count,
    host_index,
    is_spmd,
    local_device_count,
    local_ordinal,
    local_process_count,
    process_count,
    process_index,
    use_spmd,
    world_size,
)

__all__ = [
    "addressable_device_count",
    "addressable_runtime_device_count",
    "device_type",
    "global_device_count",
    "global_ordinal",
    "global_runtime_device_count",
    "host_index",
    "is_spmd",
    "local_device_count",
    "local_ordinal",
    "local_process_count",
    "process_count",
    "process_index",
    "use_spmd",
    "world_size",
]
__getattr__ = not_emulated(__name__)
