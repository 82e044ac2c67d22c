"""neuronx_distributed.optimizer as neuron-emulator provides it (docs/run-your-script.md §NxD trainer)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.nxd_zero1 import NeuronZero1Optimizer

__all__ = ["NeuronZero1Optimizer"]
__getattr__ = not_emulated(__name__)
