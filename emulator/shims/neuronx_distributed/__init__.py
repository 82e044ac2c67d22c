"""neuronx_distributed as neuron-emulator provides it: the parallel layers (tensor and data
parallel); the trainer, pipeline, MoE, inference and Lightning parts are not emulated
(docs/run-your-script.md)."""

import importlib as _importlib

from emulator.compat.gaps import NotEmulatedError as _NotEmulatedError

from . import parallel_layers

__all__ = ["parallel_layers"]
_SUBMODULES = ("parallel_layers", "utils")


def __getattr__(name: str):
    if name in _SUBMODULES:
        return _importlib.import_module(f"{__name__}.{name}")
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    raise _NotEmulatedError(f"{__name__}.{name}")
