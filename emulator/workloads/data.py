"""Datasets of the real-math workloads, all deterministic and already on the machine.

- :func:`stdlib_corpus`: the bytes of the Python standard library's own top-level ``.py`` files,
  in sorted file-name order (the same text on every host with the same Python version).
- :class:`CausalLMBatches`: random windows of that text for next-byte prediction.
- :class:`MaskedLMBatches`: the same windows with BERT's masking (15 % of positions; of those 80 %
  become ``[MASK]``, 10 % a random byte, 10 % stay).
- :class:`TeacherBatches`: a classification task labelled by a fixed random "teacher" network, so
  a student MLP can learn it.

Every batch source takes a ``rank`` and ``world_size``: rank *r* samples only its own contiguous
shard of the text with a generator seeded by ``(seed, r)``, so data-parallel ranks see different data.
"""

from __future__ import annotations

import sysconfig
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Self

import torch

from emulator.workloads.models.bert import IGNORE_INDEX

BYTE_VOCAB = 256
MASK_ID = 256  # [MASK] token of the byte-level MLM vocabulary
CORPUS_BYTES_MAX = 8 << 20


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Path | None = None) -> list[Path]:
    """Top-level ``.py`` files of the standard library, sorted by name."""
    root = stdlib_dir() if root is None else root
    files = sorted(p for p in root.glob("*.py") if p.is_file())
    if not files:
        raise FileNotFoundError(f"no .py files in the Python standard library directory {root}")
    return files


@cache
def stdlib_corpus(max_bytes: int = CORPUS_BYTES_MAX) -> torch.Tensor:
    """The concatenated source text as a ``uint8`` tensor (at most ``max_bytes``)."""
    chunks: list[bytes] = []
    total = 0
    for path in stdlib_files():
        data = path.read_bytes()
        chunks.append(data[: max_bytes - total])
        total += len(chunks[-1])
        if total >= max_bytes:
            break
    return torch.frombuffer(bytearray(b"".join(chunks)), dtype=torch.uint8)


def _generator(seed: int, rank: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + rank)


def shard(corpus: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s contiguous 1/``world_size`` of the corpus."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world size {world_size}")
    size = corpus.numel() // world_size
    return corpus[rank * size : (rank + 1) * size]


def _windows(text: torch.Tensor, batch: int, length: int, gen: torch.Generator) -> torch.Tensor:
    """``batch`` random windows of ``length`` bytes as an int64 ``(batch, length)`` tensor."""
    if text.numel() <= length:
        raise ValueError(f"text shard of {text.numel()} bytes is too short for windows of {length}")
    starts = torch.randint(0, text.numel() - length, (batch, 1), generator=gen)
    return text[starts + torch.arange(length)].long()


class _CorpusBatches:
    """Endless batches of windows of this rank's shard of the stdlib corpus."""

    def __init__(self, batch: int, seq_len: int, *, seed: int = 0, rank: int = 0, world_size: int = 1) -> None:
        self.batch, self.seq_len = batch, seq_len
        self.text = shard(stdlib_corpus(), rank, world_size)
        self.gen = _generator(seed, rank)

    def __iter__(self) -> Self:
        return self


class CausalLMBatches(_CorpusBatches):
    """``(inputs, targets)`` pairs; targets are the inputs shifted by one byte."""

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        window = _windows(self.text, self.batch, self.seq_len + 1, self.gen)
        return window[:, :-1], window[:, 1:]


def mask_tokens(
    ids: torch.Tensor, gen: torch.Generator, *, vocab: int = BYTE_VOCAB, mask_id: int = MASK_ID, rate: float = 0.15
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT masking: choose ``rate`` of the positions; of those 80 % -> ``mask_id``, 10 % -> a random
    token, 10 % unchanged. Returns ``(inputs, labels)``, labels ``IGNORE_INDEX`` where not chosen."""
    chosen = torch.rand(ids.shape, generator=gen) < rate
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))
    roll = torch.rand(ids.shape, generator=gen)
    inputs = ids.clone()
    inputs[chosen & (roll < 0.8)] = mask_id
    randomised = chosen & (roll >= 0.8) & (roll < 0.9)
    inputs[randomised] = torch.randint(0, vocab, ids.shape, generator=gen)[randomised]
    return inputs, labels


class MaskedLMBatches(_CorpusBatches):
    """``(inputs, labels)`` pairs for masked-language modelling over the byte vocabulary."""

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        return mask_tokens(_windows(self.text, self.batch, self.seq_len, self.gen), self.gen)


class TeacherBatches:
    """Inputs ``x ~ N(0, I)``; label = argmax of a fixed random two-layer teacher network.

    The teacher depends only on ``seed`` (identical on every rank); the inputs on ``(seed, rank)``.
    """

    def __init__(
        self,
        batch: int,
        in_features: int,
        n_classes: int,
        *,
        teacher_hidden: int = 64,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world size {world_size}")
        self.batch, self.in_features = batch, in_features
        teacher = _generator(seed, 10_000)
        self.w1 = torch.randn(in_features, teacher_hidden, generator=teacher) / in_features**0.5
        self.w2 = torch.randn(teacher_hidden, n_classes, generator=teacher) / teacher_hidden**0.5
        self.gen = _generator(seed, rank)

    def labels(self, x: torch.Tensor) -> torch.Tensor:
        return (torch.tanh(x @ self.w1) @ self.w2).argmax(dim=-1)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(self.batch, self.in_features, generator=self.gen)
        return x, self.labels(x)
