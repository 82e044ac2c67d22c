"""neuronx-distributed's attention kernels and transformer overrides the Llama examples call
(docs/run-your-script.md §NxD trainer): ``kernels.flash_attn.nki_flash_attn_func``,
``kernels.ring_attention_kernel.nki_ring_attn_func`` (context parallelism: not emulated) and
``overrides.transformer_overrides.apply_rotary_pos_emb`` / ``rotate_half``.

The NKI flash kernel takes Q, K, V as ``(batch, heads, head_dim, seq)`` when
``transpose_nki_inputs`` (else ``(batch, heads, seq, head_dim)``), only sequences of a multiple of
2,048, and returns ``(batch, heads, seq, head_dim)``. Here it is ATen's fused CPU flash-attention
op on the same values — the op the cost model costs as the flash kernel (docs/cost-model.md
§Flash attention) — with the kernel's softmax scale (``1/sqrt(head_dim)`` by default), causal
mask and dropout. ``mixed_precision`` changes nothing (ATen's kernel keeps its softmax statistics
in FP32 for BF16 inputs anyway), nor does ``seed`` (dropout draws from PyTorch's generator).
"""

from __future__ import annotations

from typing import Any

import torch

from emulator.compat.gaps import NotEmulatedError
from emulator.parallel.models.attention import rotate_half as _rotate_half

_FLASH = "neuronx_distributed.kernels.flash_attn.nki_flash_attn_func"


def nki_flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lnc: int = 1,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = True,
    mixed_precision: bool = True,
    seed: Any = None,
    hardware_type: Any = None,
    transpose_nki_inputs: bool = True,
) -> torch.Tensor:
    if lnc != 1:
        raise NotEmulatedError(f"{_FLASH}(lnc={lnc})", "a trn1 NeuronCore is one logical core")
    if transpose_nki_inputs:  # (b, h, d, s) -> (b, h, s, d)
        q, k, v = (t.transpose(-1, -2) for t in (q, k, v))
    if q.shape[-2] % 2048:
        raise NotImplementedError("Only support sequence as multiples of 2K")
    out, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q.contiguous(), k.contiguous(), v.contiguous(), dropout_p, causal, scale=softmax_scale
    )
    return out


def nki_ring_attn_func(*args: Any, **kwargs: Any) -> torch.Tensor:
    raise NotEmulatedError(
        "neuronx_distributed.kernels.ring_attention_kernel.nki_ring_attn_func", "context parallelism"
    )


def rotate_half(x: torch.Tensor, flash_attn: bool = False, transpose: bool = False) -> torch.Tensor:
    """NxD's signature over the model code's rotate-half: the head dimension is -2 in the flash
    kernel's transposed layout, else -1."""
    return _rotate_half(x, dim=-2 if flash_attn and transpose else -1)


def apply_rotary_pos_emb(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    flash_attn: bool = False,
    transpose_nki_inputs: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary position embedding on Q and K, ``cos``/``sin`` ``[batch, seq, dim]`` (or a table
    indexed by ``position_ids``), in either attention layout."""
    if position_ids is not None:
        cos, sin = cos[position_ids], sin[position_ids]
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # [batch, 1, seq, dim]
    if flash_attn and transpose_nki_inputs:
        cos, sin = cos.transpose(-1, -2), sin.transpose(-1, -2)
    turn = flash_attn and transpose_nki_inputs
    return q * cos + rotate_half(q, flash_attn, turn) * sin, k * cos + rotate_half(k, flash_attn, turn) * sin
