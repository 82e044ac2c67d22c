"""torch_xla.distributed.fsdp.state_dict_utils as neuron-emulator provides it (docs/run-your-script.md §FSDP)."""

from emulator.compat.fsdp_state import consolidate_sharded_model_checkpoints, consolidate_sharded_state_dicts
from emulator.compat.gaps import not_emulated

__all__ = ["consolidate_sharded_model_checkpoints", "consolidate_sharded_state_dicts"]
__getattr__ = not_emulated(__name__)
