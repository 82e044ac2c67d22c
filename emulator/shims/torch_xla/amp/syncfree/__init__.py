"""torch_xla.amp.syncfree as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import package_getattr
from emulator.compat.syncfree import SGD, Adam, AdamW

__all__ = ["SGD", "Adam", "AdamW"]
__getattr__ = package_getattr(__name__, ("adam", "adamw", "sgd"))
