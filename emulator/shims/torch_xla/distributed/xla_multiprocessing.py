"""torch_xla.distributed.xla_multiprocessing as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.spawn import spawn

__all__ = ["spawn"]
__getattr__ = not_emulated(__name__)
