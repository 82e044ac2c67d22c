"""neuronx_distributed.parallel_layers.parallel_state as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.nxd_state import (
    destroy_model_parallel,
    get_data_parallel_group,
    get_data_parallel_rank,
    get_data_parallel_replica_groups,
    get_data_parallel_size,
    get_data_parallel_src_rank,
    get_pipeline_model_parallel_group,
    get_pipeline_model_parallel_rank,
    get_pipeline_model_parallel_replica_groups,
    get_pipeline_model_parallel_size,
    get_tensor_model_parallel_group,
    get_tensor_model_parallel_rank,
    get_tensor_model_parallel_replica_groups,
    get_tensor_model_parallel_size,
    get_tensor_model_parallel_src_rank,
    get_world_group,
    initialize_model_parallel,
    is_global_rank_zero,
    model_parallel_is_initialized,
    rmsg,
)

__all__ = [
    "destroy_model_parallel",
    "get_data_parallel_group",
    "get_data_parallel_rank",
    "get_data_parallel_replica_groups",
    "get_data_parallel_size",
    "get_data_parallel_src_rank",
    "get_pipeline_model_parallel_group",
    "get_pipeline_model_parallel_rank",
    "get_pipeline_model_parallel_replica_groups",
    "get_pipeline_model_parallel_size",
    "get_tensor_model_parallel_group",
    "get_tensor_model_parallel_rank",
    "get_tensor_model_parallel_replica_groups",
    "get_tensor_model_parallel_size",
    "get_tensor_model_parallel_src_rank",
    "get_world_group",
    "initialize_model_parallel",
    "is_global_rank_zero",
    "model_parallel_is_initialized",
    "rmsg",
]
__getattr__ = not_emulated(__name__)
