"""The published Trn1 training results ``neuron-emulator bench`` plans and compares against
(docs/parallel.md §Host share and calibration)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from emulator.parallel.runner import JobRequest


@dataclass(frozen=True)
class PublishedRow:
    """A published Trn1 training result the emulator is checked against
    (docs/parallel.md §Host share and calibration): the job as ``run`` would be asked for it, at
    the Neuron SDK release it was published with (its era: emulator/costmodel/sdk.py)."""

    name: str
    request: JobRequest
    published_seq_per_s: float | None
    source: str

    @property
    def era(self) -> str:
        return self.request.sdk or ""


_SDK23 = "Neuron SDK 2.3 tutorials and the re:Invent 2022 Trainium deck (docs/parallel.md)"


def _recipe(model: str, sdk: str, **asked: Any) -> JobRequest:
    """The row's job: the model's published recipe at its published scale, at release ``sdk``."""
    return replace(JobRequest(model, published_scale=True, sdk=sdk), **asked)


PUBLISHED_ROWS = (
    # the 2022 rows (SDK 2.3): BERT-Large phase 1 at its recipe's layout and micro-batch 16, as
    # published "BF16 + SR": BF16 weights updated with stochastic rounding, gradients accumulated in
    # BF16 (the --master-weights switch would add FP32 master weights and FP32 gradient
    # accumulation, docs/parallel.md §Host share and calibration); GPT3-6.7B TP8 x DP4 (its recipe:
    # every switch off)
    PublishedRow("BERT-Large Ph1 DP32 BF16+SR", _recipe("bert-large", "2.3", master_weights=False), 2846, _SDK23),
    PublishedRow("GPT3-6.7B TP8xDP4 BF16+SR", _recipe("gpt3-6.7b", "2.3"), 7.3, _SDK23),
    # the FP32 row only gives the BF16/FP32 ratio; SDK 2.3 auto-cast FP32 matmuls to BF16 by default;
    # the tutorial ran FP32 at micro-batch 8 ("optimal ... 8 for FP32 and 16 for full BF16"), the
    # same global batch 16,384 (accumulation 64)
    PublishedRow(
        "BERT-Large Ph1 DP32 FP32",
        _recipe("bert-large", "2.3", dtype="fp32", auto_cast="matmult", master_weights=False, micro_batch=8),
        1864,
        _SDK23,
    ),
    # the LLM rows of later releases, as issue 22 gives them, each at its model's published recipe
    PublishedRow("GPT3-46B 32 nodes TP8xPP8 BF16+SR", _recipe("gpt3-46b", "2.18"), 48.24, "issue 22 (Neuron SDK 2.18)"),
    PublishedRow(
        "Llama2-13B 32 nodes TP8xPP4 FP32 opt", _recipe("llama2-13b", "2.18"), 87.44, "issue 22 (Neuron SDK 2.18)"
    ),
    PublishedRow("Llama2-7B 16 nodes TP8 FP32 opt", _recipe("llama2-7b", "2.21"), 95.14, "issue 22 (Neuron SDK 2.21)"),
)
