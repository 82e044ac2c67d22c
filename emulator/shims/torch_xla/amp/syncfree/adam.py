"""torch_xla.amp.syncfree.adam as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.syncfree import Adam

__all__ = ["Adam"]
__getattr__ = not_emulated(__name__)
