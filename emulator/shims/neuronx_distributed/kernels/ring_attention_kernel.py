"""neuronx_distributed.kernels.ring_attention_kernel as neuron-emulator provides it: importable,
``nki_ring_attn_func`` raises (context parallelism is not emulated; docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.nxd_kernels import nki_ring_attn_func

__all__ = ["nki_ring_attn_func"]
__getattr__ = not_emulated(__name__)
