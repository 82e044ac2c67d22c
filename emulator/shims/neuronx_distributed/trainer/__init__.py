"""neuronx_distributed.trainer as neuron-emulator provides it (docs/run-your-script.md §NxD trainer)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.nxd_trainer import (
    NxDModel,
    NxDOptimizer,
    initialize_parallel_model,
    initialize_parallel_optimizer,
    neuronx_distributed_config,
)
from emulator.compat.nxd_trainer_checkpoint import (
    finalize_checkpoint,
    has_checkpoint,
    load_checkpoint,
    save_checkpoint,
)

__all__ = [
    "NxDModel",
    "NxDOptimizer",
    "finalize_checkpoint",
    "has_checkpoint",
    "initialize_parallel_model",
    "initialize_parallel_optimizer",
    "load_checkpoint",
    "neuronx_distributed_config",
    "save_checkpoint",
]
__getattr__ = not_emulated(__name__)
