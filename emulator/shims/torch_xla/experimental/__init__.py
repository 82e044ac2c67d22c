"""torch_xla.experimental as neuron-emulator provides it: the PJRT names of torch_xla 2.0 that the
samples import on that version (docs/run-your-script.md)."""

from emulator.compat.gaps import package_getattr as _package_getattr

__getattr__ = _package_getattr(__name__, ("pjrt", "pjrt_backend"))
