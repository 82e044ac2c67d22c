"""The built-in training workloads of ``neuron-emulator run`` (registry; torch-free).

Two kinds:

- ``real math``: small models trained on real data on this host's CPU by one training loop
  (:mod:`emulator.workloads.runner`); the loss really falls.
- ``model scale``: the full-size models of the zoo (:mod:`emulator.workloads.models.zoo`), run as
  parallel jobs: planned on PyTorch's ``meta`` device — exact shapes, parameter, optimizer and
  activation sizes, no arithmetic and no values — then replayed (docs/parallel.md).

A :class:`WorkloadSpec` holds what the command line needs (defaults, limits, description); a
real-math model and its data are built by ``builder`` (``module:function``), imported only when a
run starts; a model-scale one by its one model code, :mod:`emulator.parallel.models`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from emulator.workloads.models.zoo import MODELS, ModelSpec

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
    builder: str | None  # real math: "module:function" returning a Task; model scale: None (a parallel job)

    @property
    def real_math(self) -> bool:
        return self.kind == REAL_MATH

    def build(self, options: TaskOptions) -> Task:
        if self.builder is None:
            raise ValueError(f"{self.name} is a model-scale model: a parallel job (emulator.parallel.runner)")
        module, _, func = self.builder.partition(":")
        return getattr(importlib.import_module(module), func)(options)


def _model_scale(model: ModelSpec) -> WorkloadSpec:
    """A model of the zoo as ``run`` and ``workloads`` see it: a parallel job of its published
    sequence length, one sequence per micro-batch (docs/parallel.md)."""
    return WorkloadSpec(
        name=model.name,
        description=model.description,
        kind=MODEL_SCALE,
        steps=10,
        batch_size=1,
        seq_len=model.default_seq_len,
        max_seq_len=model.max_seq_len,
        dtype="bf16",
        lr=1e-4,
        sample_unit=model.sample_unit,
        builder=None,
    )


def _real_math(
    name: str, batch: int, seq: int | None, max_seq: int | None, lr: float, unit: str, description: str
) -> WorkloadSpec:
    """A real-math workload: 100 fp32 steps by default, built by the function of its name in
    :mod:`emulator.workloads.tasks`."""
    return WorkloadSpec(
        name=name,
        description=description,
        kind=REAL_MATH,
        steps=100,
        batch_size=batch,
        seq_len=seq,
        max_seq_len=max_seq,
        dtype="fp32",
        lr=lr,
        sample_unit=unit,
        builder=f"emulator.workloads.tasks:{name.replace('-', '_')}",
    )


# name, default micro-batch, sequence length (None: no sequence axis), position table, lr, sample unit
# fmt: off
_REAL_MATH = {
    spec.name: spec
    for spec in (
        _real_math("gpt-tiny", 16, 128, 256, 3e-3, "seq",
                   "character-level GPT (4 layers, d_model 128, 4 heads) learning the Python stdlib's source"),
        _real_math("bert-tiny", 16, 128, 256, 2e-3, "seq",
                   "BERT-style encoder (4 layers, hidden 128) masked-LM on the Python stdlib's source bytes"),
        _real_math("mlp", 256, None, None, 3e-3, "samples",
                   "3-layer MLP (width 256) classifying inputs labelled by a fixed random teacher network"),
    )
}
# fmt: on
# the one registry: the real-math workloads, then every model-scale model of the zoo
WORKLOADS: dict[str, WorkloadSpec] = {**_REAL_MATH, **{m.name: _model_scale(m) for m in MODELS.values()}}


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
