"""neuronx_distributed.parallel_layers.layers as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.nxd_layers import ColumnParallelLinear, ParallelEmbedding, RowParallelLinear

__all__ = ["ColumnParallelLinear", "ParallelEmbedding", "RowParallelLinear"]
__getattr__ = not_emulated(__name__)
