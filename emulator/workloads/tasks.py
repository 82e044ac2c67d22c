"""Builders of the registered workloads: a model plus the batches it trains on.

Real-math tasks build their model on the CPU with a fixed seed (identical on every data-parallel
rank, as a broadcast of the initial weights would make them) and read real data. Model-scale tasks
build model and inputs on PyTorch's ``meta`` device: shapes and dtypes only, no memory, no values.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

from emulator.workloads import data
from emulator.workloads.models.bert import BERT_LARGE, BERT_TINY, BertMLM
from emulator.workloads.models.gpt import GPT, GPT3_6_7B, GPT_TINY
from emulator.workloads.models.mlp import MLP, MLP_SMALL

Batch = tuple[torch.Tensor, ...]


class TrainableModel(Protocol):
    def loss(self, *batch: torch.Tensor) -> torch.Tensor: ...


@dataclass(frozen=True)
class TaskOptions:
    batch_size: int
    seq_len: int | None = None
    seed: int = 0
    rank: int = 0
    world_size: int = 1


@dataclass
class Task:
    model: nn.Module  # has ``loss(*batch) -> scalar tensor``
    batches: Iterator[Batch]
    on_meta: bool  # model-scale: meta tensors, no values to read

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def _seq(options: TaskOptions) -> int:
    if options.seq_len is None:
        raise ValueError("this workload needs a sequence length")
    return options.seq_len


def gpt_tiny(options: TaskOptions) -> Task:
    torch.manual_seed(options.seed)
    batches = data.CausalLMBatches(
        options.batch_size, _seq(options), seed=options.seed, rank=options.rank, world_size=options.world_size
    )
    return Task(GPT(GPT_TINY), batches, on_meta=False)


def bert_tiny(options: TaskOptions) -> Task:
    torch.manual_seed(options.seed)
    batches = data.MaskedLMBatches(
        options.batch_size, _seq(options), seed=options.seed, rank=options.rank, world_size=options.world_size
    )
    return Task(BertMLM(BERT_TINY), batches, on_meta=False)


def mlp(options: TaskOptions) -> Task:
    torch.manual_seed(options.seed)
    cfg = MLP_SMALL
    batches = data.TeacherBatches(
        options.batch_size,
        cfg.in_features,
        cfg.n_classes,
        seed=options.seed,
        rank=options.rank,
        world_size=options.world_size,
    )
    return Task(MLP(cfg), batches, on_meta=False)


def _meta_tokens(batch: int, seq: int) -> Iterator[Batch]:
    """The same pair of ``(batch, seq)`` int64 meta tensors every step (inputs and labels)."""
    with torch.device("meta"):
        pair = (torch.empty(batch, seq, dtype=torch.long), torch.empty(batch, seq, dtype=torch.long))
    return itertools.repeat(pair)


def bert_large(options: TaskOptions) -> Task:
    with torch.device("meta"):
        model = BertMLM(BERT_LARGE)
    return Task(model, _meta_tokens(options.batch_size, _seq(options)), on_meta=True)


def gpt3_6_7b(options: TaskOptions) -> Task:
    with torch.device("meta"):
        model = GPT(GPT3_6_7B)
    return Task(model, _meta_tokens(options.batch_size, _seq(options)), on_meta=True)
