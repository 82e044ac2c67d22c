"""Decoder-only transformer language model (GPT-2/GPT-3 layout: pre-LayerNorm blocks, learned
positions, output projection tied to the token embedding)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from emulator.workloads.models.layers import FeedForward, SelfAttention, init_weights, positions


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int
    n_layers: int
    d_model: int
    n_heads: int
    max_seq_len: int
    d_ff: int = 0  # 0 = 4 x d_model

    @property
    def ff_width(self) -> int:
        return self.d_ff or 4 * self.d_model


# Character-level model for real training on a CPU (byte vocabulary).
GPT_TINY = GPTConfig(vocab_size=256, n_layers=4, d_model=128, n_heads=4, max_seq_len=256)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = SelfAttention(cfg.d_model, cfg.n_heads, causal=True)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.ff = FeedForward(cfg.d_model, cfg.ff_width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.ff(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.positions = nn.Embedding(cfg.max_seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.apply(init_weights)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Token ids ``(B, T)`` -> next-token logits ``(B, T, vocab)``."""
        pos = positions(ids, self.cfg.max_seq_len)
        x = self.tokens(ids) + self.positions(pos)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.tokens.weight)  # output projection tied to the embedding

    def loss(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self(ids)
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
