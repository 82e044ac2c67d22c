"""torch_xla.amp as neuron-emulator provides it: ``autocast`` (docs/run-your-script.md §Autocast)
and the sync-free optimizers; ``GradScaler`` is not emulated (BF16 needs no loss scaling)."""

from emulator.compat.autocast import autocast
from emulator.compat.gaps import package_getattr

__all__ = ["autocast"]
__getattr__ = package_getattr(__name__, ("syncfree",))
