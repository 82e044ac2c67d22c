"""neuronx_distributed.parallel_layers.grads as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.nxd_layers import (
    allreduce_sequence_parallel_gradients,
    bucket_allreduce_gradients,
    clip_grad_norm,
    get_grad_norm,
)

__all__ = [
    "allreduce_sequence_parallel_gradients",
    "bucket_allreduce_gradients",
    "clip_grad_norm",
    "get_grad_norm",
]
__getattr__ = not_emulated(__name__)
