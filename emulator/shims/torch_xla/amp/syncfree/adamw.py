"""torch_xla.amp.syncfree.adamw as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.syncfree import AdamW

__all__ = ["AdamW"]
__getattr__ = not_emulated(__name__)
