"""A plain multi-layer perceptron classifier."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class MLPConfig:
    in_features: int
    hidden: int
    depth: int  # hidden layers
    n_classes: int


MLP_SMALL = MLPConfig(in_features=32, hidden=256, depth=2, n_classes=10)


class MLP(nn.Module):
    def __init__(self, cfg: MLPConfig) -> None:
        super().__init__()
        self.cfg = cfg
        widths = [cfg.in_features] + [cfg.hidden] * cfg.depth
        layers: list[nn.Module] = []
        for n_in, n_out in itertools.pairwise(widths):
            layers += [nn.Linear(n_in, n_out), nn.ReLU()]
        layers.append(nn.Linear(widths[-1], cfg.n_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def loss(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self(x).float(), labels)
