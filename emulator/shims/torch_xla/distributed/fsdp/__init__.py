"""torch_xla.distributed.fsdp as neuron-emulator provides it (docs/run-your-script.md §FSDP);
submodules ``wrap`` and ``state_dict_utils``."""

from emulator.compat.fsdp import XlaFullyShardedDataParallel
from emulator.compat.fsdp_state import (
    checkpoint_module,
    consolidate_sharded_model_checkpoints,
    consolidate_sharded_state_dicts,
)
from emulator.compat.gaps import package_getattr

__all__ = [
    "XlaFullyShardedDataParallel",
    "checkpoint_module",
    "consolidate_sharded_model_checkpoints",
    "consolidate_sharded_state_dicts",
]
__getattr__ = package_getattr(__name__, ("wrap", "state_dict_utils"))
