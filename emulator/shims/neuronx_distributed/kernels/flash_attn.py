"""neuronx_distributed.kernels.flash_attn as neuron-emulator provides it (docs/run-your-script.md §NxD trainer)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.nxd_kernels import nki_flash_attn_func

__all__ = ["nki_flash_attn_func"]
__getattr__ = not_emulated(__name__)
