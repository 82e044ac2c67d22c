"""neuronx_distributed as neuron-emulator provides it: the parallel layers (tensor and data
parallel), the trainer API (config, model and optimizer wrappers, ZeRO-1, checkpoints); the
pipeline, MoE, inference and Lightning parts are not emulated (docs/run-your-script.md)."""

from emulator.compat.gaps import package_getattr as _package_getattr

from . import optimizer, parallel_layers, trainer
from .trainer import (
    finalize_checkpoint,
    has_checkpoint,
    initialize_parallel_model,
    initialize_parallel_optimizer,
    load_checkpoint,
    neuronx_distributed_config,
    save_checkpoint,
)

__all__ = [
    "finalize_checkpoint",
    "has_checkpoint",
    "initialize_parallel_model",
    "initialize_parallel_optimizer",
    "load_checkpoint",
    "neuronx_distributed_config",
    "optimizer",
    "parallel_layers",
    "save_checkpoint",
    "trainer",
]


__getattr__ = _package_getattr(
    __name__, ("kernels", "modules", "optimizer", "overrides", "parallel_layers", "trainer", "utils")
)
