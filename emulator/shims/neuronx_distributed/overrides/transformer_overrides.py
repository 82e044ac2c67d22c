"""neuronx_distributed.overrides.transformer_overrides as neuron-emulator provides it
(docs/run-your-script.md §NxD trainer)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.nxd_kernels import apply_rotary_pos_emb, rotate_half

__all__ = ["apply_rotary_pos_emb", "rotate_half"]
__getattr__ = not_emulated(__name__)
