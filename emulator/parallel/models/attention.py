"""Self-attention of the model-scale transformer (``emulator/parallel/models/transformer.py``):
rotary position embeddings, the tensor-parallel attention layer (column-parallel QKV split by
heads, the attention core, row-parallel output projection) and :func:`flash_attention`.

The attention core is plain ops (matmul, scale, causal mask, softmax, dropout, matmul), or with
``flash`` one fused kernel each way; ``recompute="selective"`` checkpoints only the core
(Megatron's ``selective`` granularity, NxD's ``CoreAttention``; docs/models.md §Pipeline stages).
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from emulator.parallel.layers import ColumnParallelLinear, RowParallelLinear
from emulator.parallel.mappings import enter_tp_region, tp_size
from emulator.workloads.models.zoo import ModelSpec, kv_layout


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    return F.dropout(x, p, training) if p > 0.0 and training else x


# --------------------------------------------------------------------------------------------
# Rotary position embedding
# --------------------------------------------------------------------------------------------


def _llama3_scaled(inv_freq: torch.Tensor, scaling: tuple[float, float, float, int]) -> torch.Tensor:
    """Llama 3.1's frequency rescaling: long wavelengths divided by ``factor``, short ones kept,
    a smooth blend between (``rope_scaling`` of the model's config)."""
    factor, low_freq_factor, high_freq_factor, original_context = scaling
    wavelen = 2 * math.pi / inv_freq
    low_freq_wavelen = original_context / low_freq_factor
    high_freq_wavelen = original_context / high_freq_factor
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(medium, blended, scaled)


class RotaryEmbedding(nn.Module):
    inv_freq: torch.Tensor  # a buffer

    def __init__(self, head_dim: int, theta: float, scaling: tuple[float, float, float, int] | None) -> None:
        super().__init__()
        # Computed on the CPU (a few dozen values; ``arange`` on meta would load PyTorch's Python
        # meta kernels, seconds on first use), then placed where the module is being built.
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float32, device="cpu") / head_dim
        inv_freq = 1.0 / theta**exponents
        if scaling is not None:
            inv_freq = _llama3_scaled(inv_freq, scaling)
        self.register_buffer("inv_freq", inv_freq.to(torch.get_default_device()), persistent=False)

    def forward(self, seq: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos`` and ``sin`` tables ``[seq, 1, 1, head_dim]`` (broadcast over batch and heads)."""
        positions = torch.arange(seq, device=self.inv_freq.device, dtype=torch.float32)
        freqs = torch.outer(positions, self.inv_freq.float())  # fp32 even in a bf16 model
        angles = torch.cat([freqs, freqs], dim=-1)[:, None, None, :]
        return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The two halves of the head dimension ``dim`` swapped, the second negated (rotate-half)."""
    x1, x2 = x.chunk(2, dim=dim)
    return torch.cat([-x2, x1], dim=dim)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x [s, b, heads, head_dim]`` by the position angles (rotate-half convention)."""
    return x * cos + rotate_half(x) * sin


# --------------------------------------------------------------------------------------------
# Transformer layer
# --------------------------------------------------------------------------------------------


class Attention(nn.Module):
    """Self-attention of this rank's heads: column-parallel QKV, the attention core (plain ops, or
    :func:`flash_attention`), row-parallel output projection."""

    def __init__(self, spec: ModelSpec, *, flash: bool = False, recompute: str = "none") -> None:
        super().__init__()
        tp = tp_size()
        if spec.hidden % spec.heads:
            raise ValueError(f"{spec.name}: hidden size {spec.hidden} is not divisible by {spec.heads} heads")
        self.head_dim = spec.hidden // spec.heads
        if spec.heads % tp:
            raise ValueError(f"{spec.name}: {spec.heads} attention heads do not split over tensor-parallel size {tp}")
        self.heads = spec.heads // tp
        self.kv_heads, self.kv_replicas = kv_layout(spec.heads, spec.kv_heads, tp)
        kv_total = self.kv_heads * tp  # with replication: more than spec.kv_heads
        self.fused = spec.fused_qkv
        q_out, kv_out = spec.heads * self.head_dim, kv_total * self.head_dim
        if self.fused:
            self.qkv = ColumnParallelLinear(spec.hidden, q_out + 2 * kv_out, bias=spec.bias)
            kv_params = list(self.qkv.parameters())
        else:
            self.query = ColumnParallelLinear(spec.hidden, q_out, bias=spec.bias)
            self.key = ColumnParallelLinear(spec.hidden, kv_out, bias=spec.bias)
            self.value = ColumnParallelLinear(spec.hidden, kv_out, bias=spec.bias)
            kv_params = [*self.key.parameters(), *self.value.parameters()]
        if self.kv_replicas > 1:
            # The key/value rows are copies held by kv_replicas ranks (NxD's kv-shared group):
            # their gradients are partial and sum over those ranks once per step.
            for p in kv_params:
                p.kv_replicas = self.kv_replicas  # type: ignore[attr-defined]  # a Megatron-style tag on the Parameter
        self.out = RowParallelLinear(q_out, spec.hidden, bias=spec.bias)
        self.dropout = spec.attention_dropout
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.causal = spec.causal
        self.flash = flash
        self.recompute_core = recompute == "selective"

    def forward(
        self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor] | None, mask: torch.Tensor | None
    ) -> torch.Tensor:
        hd = self.head_dim
        if self.fused:  # [s, b, (heads + 2 kv_heads) * hd]: queries, keys, values of this rank's heads
            qkv = self.qkv(x)
            seq, batch = qkv.shape[0], qkv.shape[1]
            qk, v = qkv.view(seq, batch, -1, hd).split([self.heads + self.kv_heads, self.kv_heads], dim=2)
            if rotary is not None:  # queries and keys rotated together (the same ops, half as many)
                qk = apply_rotary(qk, *rotary)
            q, k = qk.split([self.heads, self.kv_heads], dim=2)
        else:  # one all-reduce (all-gather under SP) of the input for the three projections
            full = enter_tp_region(x)
            q, k, v = self.query.local_forward(full), self.key.local_forward(full), self.value.local_forward(full)
            seq, batch = q.shape[0], q.shape[1]
            q = q.view(seq, batch, self.heads, hd)
            k = k.view(seq, batch, self.kv_heads, hd)
            v = v.view(seq, batch, self.kv_heads, hd)
            if rotary is not None:
                q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
        q, k, v = q.permute(1, 2, 0, 3), k.permute(1, 2, 0, 3), v.permute(1, 2, 0, 3)  # [b, heads, s, hd]
        if self.kv_heads != self.heads:  # grouped-query attention: each KV head serves a group of queries
            group = self.heads // self.kv_heads
            k = k[:, :, None].expand(batch, self.kv_heads, group, seq, hd).reshape(batch, self.heads, seq, hd)
            v = v[:, :, None].expand(batch, self.kv_heads, group, seq, hd).reshape(batch, self.heads, seq, hd)
        core = functools.partial(self.core, q, k, v, mask)
        if self.recompute_core and torch.is_grad_enabled():
            # selective recomputation (module docstring); the inputs through the closure, as
            # StageModule.forward passes a layer's to checkpoint (see there why)
            context = checkpoint(core, use_reentrant=False, early_stop=False)
        else:
            context = core()
        return self.out(context.permute(2, 0, 1, 3).reshape(seq, batch, self.heads * hd))

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """The attention core of ``[b, heads, s, hd]`` queries, keys and values: the context."""
        p = self.dropout if self.training else 0.0
        if self.flash:
            return flash_attention(q, k, v, causal=self.causal, dropout=p, scale=self.scale)
        scores = (q @ k.transpose(-2, -1)) * self.scale
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))
        probs = dropout(F.softmax(scores, dim=-1), p, self.training)
        return probs @ v


def flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, dropout: float, scale: float
) -> torch.Tensor:
    """Flash attention (Dao et al. 2022) as one fused op each way, the shape of the NKI flash
    attention kernel the NxD Llama recipes use: the scores of a tile of queries against a tile of
    keys stay in on-chip memory, softmax runs online, and only the output and its per-row
    log-sum-exp reach HBM; backward recomputes the scores from Q, K, V and that statistic. It is
    ATen's fused flash-attention op (``_scaled_dot_product_flash_attention_for_cpu`` and its
    backward: PyTorch's own implementation of the same algorithm), which the capture records as
    one op and the cost model costs as a fused attention (docs/cost-model.md)."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, dropout, causal, scale=scale)[0]
