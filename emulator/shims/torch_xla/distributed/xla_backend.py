"""torch_xla.distributed.xla_backend as neuron-emulator provides it: importing it makes ``xla`` a
torch.distributed backend and ``xla://`` an init method (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.process_group import ProcessGroupXla, register

register()

__all__ = ["ProcessGroupXla"]
__getattr__ = not_emulated(__name__)
