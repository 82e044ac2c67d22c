"""Transformer building blocks shared by the GPT and BERT models (layers, positions, initialisation).

Attention is written with plain ops (projection, matmul, mask, softmax, matmul) rather than a
fused kernel, so every op the capture layer records has a well-defined shape and FLOP count —
and the same code runs on real CPU tensors and on ``meta`` tensors of a model-scale workload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class TransformerConfig:
    """A GPT's or a BERT's dimensions."""

    vocab_size: int
    n_layers: int
    d_model: int
    n_heads: int
    max_seq_len: int
    d_ff: int = 0  # 0 = 4 x d_model

    @property
    def ff_width(self) -> int:
        return self.d_ff or 4 * self.d_model


class SelfAttention(nn.Module):
    """Multi-head self-attention; ``causal`` hides later positions (decoder), else bidirectional."""

    def __init__(self, d_model: int, n_heads: int, *, causal: bool) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} is not divisible by {n_heads} heads")
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.causal = causal
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, d_model = x.shape
        # (B, T, 3D) -> three (B, H, T, Dh) tensors
        q, k, v = self.qkv(x).view(batch, seq, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        if self.causal:
            future = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        weights = F.softmax(scores, dim=-1)
        context = (weights @ v).transpose(1, 2).reshape(batch, seq, d_model)
        return self.out(context)


class FeedForward(nn.Module):
    """Position-wise two-layer MLP with GELU (width ``d_ff``, 4 x d_model in GPT and BERT)."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, d_ff)
        self.down = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


def learned_embeddings(cfg: TransformerConfig) -> tuple[nn.Embedding, nn.Embedding]:
    """The token embedding and the learned position table of GPT and BERT, both of width d_model."""
    return nn.Embedding(cfg.vocab_size, cfg.d_model), nn.Embedding(cfg.max_seq_len, cfg.d_model)


def positions(ids: torch.Tensor, max_seq_len: int) -> torch.Tensor:
    """The position indices ``0..T-1`` of token ids ``(B, T)``; a sequence longer than the
    model's position table (``max_seq_len``) is refused."""
    seq = ids.shape[1]
    if seq > max_seq_len:
        raise ValueError(f"sequence length {seq} exceeds the model's maximum {max_seq_len}")
    return torch.arange(seq, device=ids.device)


def init_weights(module: nn.Module) -> None:
    """GPT-2 and BERT initialisation (``model.apply``): weights and embeddings N(0, 0.02), biases 0."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=0.02)
        nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
