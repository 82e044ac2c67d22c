"""neuronx_distributed.utils.adamw_fp32_optim_params as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.nxd_optim import AdamW_FP32OptimParams

__all__ = ["AdamW_FP32OptimParams"]
__getattr__ = not_emulated(__name__)
