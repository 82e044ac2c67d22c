"""torch_xla.utils.checkpoint as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.checkpoint import checkpoint
from emulator.compat.gaps import not_emulated

__all__ = ["checkpoint"]
__getattr__ = not_emulated(__name__)
