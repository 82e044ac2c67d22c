"""neuronx_distributed.modules.qkv_linear as neuron-emulator provides it (docs/run-your-script.md §NxD trainer)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.nxd_gqa import GQAQKVColumnParallelLinear

__all__ = ["GQAQKVColumnParallelLinear"]
__getattr__ = not_emulated(__name__)
