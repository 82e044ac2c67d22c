"""torch_xla.distributed.zero_redundancy_optimizer as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.zero1 import ZeroRedundancyOptimizer

__all__ = ["ZeroRedundancyOptimizer"]
__getattr__ = not_emulated(__name__)
