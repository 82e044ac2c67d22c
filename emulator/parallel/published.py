"""The published Trn1 training results ``neuron-emulator bench`` plans and compares against
(docs/parallel.md §Host share and calibration)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from emulator.parallel.runner import JobRequest


@dataclass(frozen=True)
class PublishedRow:
    """A published Trn1 training result the emulator is checked against
    (docs/parallel.md §Host share and calibration): the job as ``run`` would be asked for it."""

    name: str
    request: JobRequest
    published_seq_per_s: float | None
    source: str


_SDK23 = "Neuron SDK 2.3 tutorials and the re:Invent 2022 Trainium deck (docs/parallel.md)"
_BERT_PH1 = JobRequest("bert-large", tp=1, pp=1, dp=32, micro_batch=16, global_batch=16384, seq_len=128, dtype="bf16")
_GPT3_TP8 = JobRequest("gpt3-6.7b", tp=8, pp=1, dp=4, micro_batch=1, global_batch=64, seq_len=2048, dtype="bf16")
PUBLISHED_ROWS = (
    PublishedRow("BERT-Large Ph1 DP32 BF16+SR", _BERT_PH1, 2846, _SDK23),
    PublishedRow("GPT3-6.7B TP8xDP4 BF16+SR", _GPT3_TP8, 7.3, _SDK23),
    # the FP32 row only gives the BF16/FP32 ratio; SDK 2.3 auto-cast FP32 matmuls to BF16 by default
    PublishedRow("BERT-Large Ph1 DP32 FP32", replace(_BERT_PH1, dtype="fp32", auto_cast="matmult"), 1864, _SDK23),
)
