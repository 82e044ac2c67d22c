"""torch_xla.amp as neuron-emulator provides it: the sync-free optimizers (docs/run-your-script.md);
``autocast`` and ``GradScaler`` are not emulated."""

from emulator.compat.gaps import package_getattr

__getattr__ = package_getattr(__name__, ("syncfree",))
