"""Decoder-only transformer language model (GPT-2/GPT-3 layout: pre-LayerNorm blocks, learned
positions, output projection tied to the token embedding)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from emulator.workloads.models import layers
from emulator.workloads.models.layers import FeedForward, SelfAttention, TransformerConfig, init_weights

# Character-level model for real training on a CPU (byte vocabulary).
GPT_TINY = TransformerConfig(vocab_size=256, n_layers=4, d_model=128, n_heads=4, max_seq_len=256)


class Block(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = SelfAttention(cfg.d_model, cfg.n_heads, causal=True)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.ff = FeedForward(cfg.d_model, cfg.ff_width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.ff(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tokens, self.positions = layers.learned_embeddings(cfg)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.apply(init_weights)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Token ids ``(B, T)`` -> next-token logits ``(B, T, vocab)``."""
        pos = layers.positions(ids, self.cfg.max_seq_len)
        x = self.tokens(ids) + self.positions(pos)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.tokens.weight)  # output projection tied to the embedding

    def loss(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self(ids)
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
