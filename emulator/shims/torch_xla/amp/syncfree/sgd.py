"""torch_xla.amp.syncfree.sgd as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.syncfree import SGD

__all__ = ["SGD"]
__getattr__ = not_emulated(__name__)
