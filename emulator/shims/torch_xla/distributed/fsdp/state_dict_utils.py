"""torch_xla.distributed.fsdp.state_dict_utils as neuron-emulator provides it (docs/run-your-script.md §FSDP)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.xla_fsdp import consolidate_sharded_model_checkpoints

__all__ = ["consolidate_sharded_model_checkpoints"]
__getattr__ = not_emulated(__name__)
