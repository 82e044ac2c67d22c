"""neuronx_distributed as neuron-emulator provides it: the parallel layers (tensor and data
parallel); the trainer, pipeline, MoE, inference and Lightning parts are not emulated
(docs/run-your-script.md)."""

from emulator.compat.gaps import package_getattr as _package_getattr

from . import parallel_layers

__all__ = ["parallel_layers"]


__getattr__ = _package_getattr(__name__, ("parallel_layers", "utils"))
