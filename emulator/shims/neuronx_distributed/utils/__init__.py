"""neuronx_distributed.utils as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated

__getattr__ = not_emulated(__name__)
