"""BERT-style bidirectional encoder with a masked-language-model head (post-LayerNorm layers,
word + position + segment embeddings, MLM decoder tied to the word embedding)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from emulator.workloads.models import layers
from emulator.workloads.models.layers import FeedForward, SelfAttention, TransformerConfig, init_weights

IGNORE_INDEX = -100  # label of positions that are not predicted
TYPE_VOCAB_SIZE = 2  # token types (segments A and B)


# Byte-level encoder for real MLM training on a CPU: 256 byte values + [MASK].
BERT_TINY = TransformerConfig(vocab_size=257, n_layers=4, d_model=128, n_heads=4, max_seq_len=256)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.attn = SelfAttention(cfg.d_model, cfg.n_heads, causal=False)
        self.ln1 = nn.LayerNorm(cfg.d_model, eps=1e-12)
        self.ff = FeedForward(cfg.d_model, cfg.ff_width)
        self.ln2 = nn.LayerNorm(cfg.d_model, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.ff(x))


class MLMHead(nn.Module):
    """Transform (dense + GELU + LayerNorm), then scores over the vocabulary."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln = nn.LayerNorm(cfg.d_model, eps=1e-12)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, x: torch.Tensor, word_embedding: torch.Tensor) -> torch.Tensor:
        return F.linear(self.ln(F.gelu(self.dense(x))), word_embedding, self.bias)


class BertMLM(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.words, self.positions = layers.learned_embeddings(cfg)
        self.segments = nn.Embedding(TYPE_VOCAB_SIZE, cfg.d_model)
        self.ln_embed = nn.LayerNorm(cfg.d_model, eps=1e-12)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_layers))
        self.mlm = MLMHead(cfg)
        self.apply(init_weights)

    def forward(self, ids: torch.Tensor, segment_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Token ids ``(B, T)`` -> vocabulary scores ``(B, T, vocab)`` at every position."""
        pos = layers.positions(ids, self.cfg.max_seq_len)
        if segment_ids is None:
            segment_ids = torch.zeros_like(ids)
        x = self.ln_embed(self.words(ids) + self.positions(pos) + self.segments(segment_ids))
        for layer in self.layers:
            x = layer(x)
        return self.mlm(x, self.words.weight)

    def loss(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy over the masked positions (labels elsewhere are ``IGNORE_INDEX``)."""
        logits = self(ids)
        return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX)
