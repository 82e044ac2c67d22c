"""torch_xla as neuron-emulator provides it (``neuron-emulator exec``; docs/run-your-script.md)."""

from emulator.compat.activate import install as _install
from emulator.compat.gaps import package_getattr as _package_getattr
from emulator.compat.process_group import register as _register_xla_backend
from emulator.compat.top import __version__, compile, device, devices, launch, sync

_install()
_register_xla_backend()  # as torch_xla 2.5+ does on import: init_process_group('xla') works at once

__all__ = ["__version__", "compile", "device", "devices", "launch", "sync"]


__getattr__ = _package_getattr(
    __name__, ("core", "runtime", "distributed", "utils", "debug", "amp", "test", "experimental")
)
