"""torch_xla as neuron-emulator provides it (``neuron-emulator exec``; docs/run-your-script.md)."""

import importlib as _importlib

from emulator.compat.activate import install as _install
from emulator.compat.gaps import NotEmulatedError as _NotEmulatedError
from emulator.compat.process_group import register as _register_xla_backend
from emulator.compat.top import __version__, device, devices, launch, sync

_install()
_register_xla_backend()  # as torch_xla 2.5+ does on import: init_process_group('xla') works at once
_SUBMODULES = ("core", "runtime", "distributed", "utils", "debug")

__all__ = ["__version__", "device", "devices", "launch", "sync"]


def __getattr__(name: str):
    if name in _SUBMODULES:
        return _importlib.import_module(f"{__name__}.{name}")
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    raise _NotEmulatedError(f"{__name__}.{name}")
