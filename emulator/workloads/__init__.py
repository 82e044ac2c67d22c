"""The built-in training workloads of ``neuron-emulator run`` (registry; torch-free).

Two kinds share one training loop (:mod:`emulator.workloads.runner`):

- ``real math``: small models trained on real data on this host's CPU; the loss really falls.
- ``model scale``: full-size models built on PyTorch's ``meta`` device — exact shapes, parameter,
  optimizer and activation sizes, no arithmetic and no values (there is no loss to show).

A :class:`WorkloadSpec` holds what the command line needs (defaults, limits, description); the
model and data are built by ``builder`` (``module:function``), imported only when a run starts.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:
    from emulator.workloads.tasks import Task, TaskOptions

REAL_MATH: Final = "real math"
MODEL_SCALE: Final = "model scale"
DTYPES = ("fp32", "bf16", "fp16")
AUTO_CAST = ("none", "matmult", "all")


class UnknownWorkload(ValueError):
    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"unknown workload {name!r} (known: {', '.join(WORKLOADS)}; see 'neuron-emulator workloads')")


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    description: str  # one line
    kind: Literal["real math", "model scale"]
    steps: int  # default number of optimizer steps
    batch_size: int  # default micro-batch per rank
    seq_len: int | None  # default sequence length (None: the model has no sequence axis)
    max_seq_len: int | None  # longest sequence the model accepts (its position table)
    dtype: str  # default parameter dtype: fp32, bf16 or fp16
    lr: float  # default AdamW learning rate
    sample_unit: str  # what one sample is called in throughput figures: "seq" or "samples"
    builder: str  # "module:function" returning a Task

    @property
    def real_math(self) -> bool:
        return self.kind == REAL_MATH

    def build(self, options: TaskOptions) -> Task:
        module, _, func = self.builder.partition(":")
        return getattr(importlib.import_module(module), func)(options)


_TASKS = "emulator.workloads.tasks"
WORKLOADS: dict[str, WorkloadSpec] = {
    spec.name: spec
    for spec in (
        WorkloadSpec(
            name="gpt-tiny",
            description="character-level GPT (4 layers, d_model 128, 4 heads) learning the Python stdlib's source",
            kind=REAL_MATH,
            steps=100,
            batch_size=16,
            seq_len=128,
            max_seq_len=256,
            dtype="fp32",
            lr=3e-3,
            sample_unit="seq",
            builder=f"{_TASKS}:gpt_tiny",
        ),
        WorkloadSpec(
            name="bert-tiny",
            description="BERT-style encoder (4 layers, hidden 128) masked-LM on the Python stdlib's source bytes",
            kind=REAL_MATH,
            steps=100,
            batch_size=16,
            seq_len=128,
            max_seq_len=256,
            dtype="fp32",
            lr=2e-3,
            sample_unit="seq",
            builder=f"{_TASKS}:bert_tiny",
        ),
        WorkloadSpec(
            name="mlp",
            description="3-layer MLP (width 256) classifying inputs labelled by a fixed random teacher network",
            kind=REAL_MATH,
            steps=100,
            batch_size=256,
            seq_len=None,
            max_seq_len=None,
            dtype="fp32",
            lr=3e-3,
            sample_unit="samples",
            builder=f"{_TASKS}:mlp",
        ),
        WorkloadSpec(
            name="bert-large",
            description="BERT-Large (24 layers, hidden 1024, 16 heads, 335M params) MLM pre-training, on meta",
            kind=MODEL_SCALE,
            steps=20,
            batch_size=16,
            seq_len=128,
            max_seq_len=512,
            dtype="bf16",
            lr=1e-4,
            sample_unit="seq",
            builder=f"{_TASKS}:bert_large",
        ),
        WorkloadSpec(
            name="gpt3-6.7b",
            description="GPT-3 6.7B (32 layers, d_model 4096, 32 heads, seq 2048) pre-training, on meta",
            kind=MODEL_SCALE,
            steps=10,
            batch_size=1,
            seq_len=2048,
            max_seq_len=2048,
            dtype="bf16",
            lr=1.2e-4,
            sample_unit="seq",
            builder=f"{_TASKS}:gpt3_6_7b",
        ),
    )
}


def get_workload(name: str) -> WorkloadSpec:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UnknownWorkload(name) from None


__all__ = [
    "AUTO_CAST",
    "DTYPES",
    "MODEL_SCALE",
    "REAL_MATH",
    "WORKLOADS",
    "UnknownWorkload",
    "WorkloadSpec",
    "get_workload",
]
