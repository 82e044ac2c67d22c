"""neuronx_distributed.parallel_layers.utils as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.nxd_layers import (
    get_local_world_size,
    move_model_to_device,
    param_is_not_tensor_parallel_duplicate,
    requires_init_pg_override,
)
from emulator.parallel.partition import (
    copy_tensor_model_parallel_attributes,
    divide,
    set_defaults_if_not_set_tensor_model_parallel_attributes,
    set_tensor_model_parallel_attributes,
    split_tensor_along_last_dim,
)

__all__ = [
    "copy_tensor_model_parallel_attributes",
    "divide",
    "get_local_world_size",
    "move_model_to_device",
    "param_is_not_tensor_parallel_duplicate",
    "requires_init_pg_override",
    "set_defaults_if_not_set_tensor_model_parallel_attributes",
    "set_tensor_model_parallel_attributes",
    "split_tensor_along_last_dim",
]
__getattr__ = not_emulated(__name__)
