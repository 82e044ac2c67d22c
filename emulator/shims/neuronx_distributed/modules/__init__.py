"""neuronx_distributed.modules as neuron-emulator provides it (docs/run-your-script.md §NxD trainer)."""

from emulator.compat.gaps import package_getattr as _package_getattr

__getattr__ = _package_getattr(__name__, ("qkv_linear",))
