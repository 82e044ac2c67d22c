"""torch_xla.experimental.pjrt_backend as neuron-emulator provides it: importing it makes
``init_process_group("xla", init_method="pjrt://")`` work (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.process_group import register as _register

_register()
__getattr__ = not_emulated(__name__)
