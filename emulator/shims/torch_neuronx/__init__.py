"""torch_neuronx as neuron-emulator provides it: the package a torch-neuronx script imports
(training needs only that it exists); inference tracing is not emulated (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated, refuse
from emulator.compat.top import NEURONX_VERSION as __version__

trace = refuse("torch_neuronx.trace", "inference tracing to a NEFF")

__all__ = ["__version__", "trace"]
__getattr__ = not_emulated(__name__)
