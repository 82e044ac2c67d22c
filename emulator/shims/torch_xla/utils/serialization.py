"""torch_xla.utils.serialization as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.xser import load, save

__all__ = ["load", "save"]
__getattr__ = not_emulated(__name__)
