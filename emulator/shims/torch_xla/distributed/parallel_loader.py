"""torch_xla.distributed.parallel_loader as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.loader import MpDeviceLoader, ParallelLoader, PerDeviceLoader

__all__ = ["MpDeviceLoader", "ParallelLoader", "PerDeviceLoader"]
__getattr__ = not_emulated(__name__)
