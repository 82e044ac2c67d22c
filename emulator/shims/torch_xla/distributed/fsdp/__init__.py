"""torch_xla.distributed.fsdp as neuron-emulator provides it (docs/run-your-script.md §FSDP)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.xla_fsdp import (
    XlaFullyShardedDataParallel,
    checkpoint_module,
    consolidate_sharded_model_checkpoints,
)

from . import state_dict_utils, wrap

__all__ = [
    "XlaFullyShardedDataParallel",
    "checkpoint_module",
    "consolidate_sharded_model_checkpoints",
    "state_dict_utils",
    "wrap",
]
__getattr__ = not_emulated(__name__)
