"""neuronx_distributed.parallel_layers as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.nxd_layers import (
    ColumnParallelLinear,
    ParallelEmbedding,
    RowParallelLinear,
    clip_grad_norm,
    copy_to_tensor_model_parallel_region,
    gather_from_tensor_model_parallel_region,
    model_parallel_xla_manual_seed,
    move_model_to_device,
    parallel_cross_entropy,
    reduce_from_tensor_model_parallel_region,
    scatter_to_tensor_model_parallel_region,
)
from emulator.compat.nxd_state import initialize_model_parallel
from emulator.parallel.partition import (
    copy_tensor_model_parallel_attributes,
    set_defaults_if_not_set_tensor_model_parallel_attributes,
    set_tensor_model_parallel_attributes,
    split_tensor_along_last_dim,
)

from . import checkpointing, grads, layers, loss_functions, mappings, parallel_state, random, utils
from .checkpointing import load, save

__all__ = [
    "ColumnParallelLinear",
    "ParallelEmbedding",
    "RowParallelLinear",
    "checkpointing",
    "clip_grad_norm",
    "copy_tensor_model_parallel_attributes",
    "copy_to_tensor_model_parallel_region",
    "gather_from_tensor_model_parallel_region",
    "grads",
    "initialize_model_parallel",
    "layers",
    "load",
    "loss_functions",
    "mappings",
    "model_parallel_xla_manual_seed",
    "move_model_to_device",
    "parallel_cross_entropy",
    "parallel_state",
    "random",
    "reduce_from_tensor_model_parallel_region",
    "save",
    "scatter_to_tensor_model_parallel_region",
    "set_defaults_if_not_set_tensor_model_parallel_attributes",
    "set_tensor_model_parallel_attributes",
    "split_tensor_along_last_dim",
    "utils",
]
__getattr__ = not_emulated(__name__)
