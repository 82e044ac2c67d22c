"""neuronx_distributed.parallel_layers.checkpointing as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.nxd_checkpoint import load, save

__all__ = ["load", "save"]
__getattr__ = not_emulated(__name__)
