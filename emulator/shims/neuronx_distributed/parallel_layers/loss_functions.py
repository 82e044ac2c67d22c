"""neuronx_distributed.parallel_layers.loss_functions as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.nxd_layers import parallel_cross_entropy

__all__ = ["parallel_cross_entropy"]
__getattr__ = not_emulated(__name__)
