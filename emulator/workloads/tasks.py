"""Builders of the registered workloads: a model plus the batches it trains on.

Each builds its model on the CPU with a fixed seed (identical on every data-parallel rank, as a
broadcast of the initial weights would make them) and reads real data. (Model-scale models are no
tasks: they run as parallel jobs, :mod:`emulator.parallel.runner`.)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

from emulator.workloads import data
from emulator.workloads.models.bert import BERT_TINY, BertMLM
from emulator.workloads.models.gpt import GPT, GPT_TINY
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
    return Task(GPT(GPT_TINY), batches)


def bert_tiny(options: TaskOptions) -> Task:
    torch.manual_seed(options.seed)
    batches = data.MaskedLMBatches(
        options.batch_size, _seq(options), seed=options.seed, rank=options.rank, world_size=options.world_size
    )
    return Task(BertMLM(BERT_TINY), batches)


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
    return Task(MLP(cfg), batches)
