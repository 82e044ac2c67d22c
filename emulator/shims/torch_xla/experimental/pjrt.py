"""torch_xla.experimental.pjrt as neuron-emulator provides it: torch_xla 2.0's names for what
``torch_xla.runtime`` has since (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.runtime import (
    addressable_device_count,
    device_type,
    global_ordinal,
    local_ordinal,
    process_count,
    process_index,
    world_size,
)


def using_pjrt() -> bool:
    """The runtime is PJRT (the Neuron plugin's), as on torch-neuronx 2.x."""
    return True


__all__ = [
    "addressable_device_count",
    "device_type",
    "global_ordinal",
    "local_ordinal",
    "process_count",
    "process_index",
    "using_pjrt",
    "world_size",
]
__getattr__ = not_emulated(__name__)
