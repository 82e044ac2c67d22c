"""neuronx_distributed.parallel_layers.random as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.nxd_layers import model_parallel_xla_manual_seed

__all__ = ["model_parallel_xla_manual_seed"]
__getattr__ = not_emulated(__name__)
