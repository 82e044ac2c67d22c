"""The published Trn1 training results ``neuron-emulator bench`` plans and compares against
(docs/parallel.md §Host share and calibration)."""

from __future__ import annotations

from dataclasses import dataclass

from emulator.parallel.runner import JobRequest


@dataclass(frozen=True)
class PublishedRow:
    """A published Trn1 training result the emulator is checked against
    (docs/parallel.md §Host share and calibration)."""

    name: str
    model: str
    tp: int
    pp: int
    dp: int
    micro_batch: int
    global_batch: int
    seq_len: int
    dtype: str
    auto_cast: str | None
    published_seq_per_s: float | None
    source: str


_SDK23 = "Neuron SDK 2.3 tutorials and the re:Invent 2022 Trainium deck (docs/parallel.md)"
PUBLISHED_ROWS = (
    PublishedRow("BERT-Large Ph1 DP32 BF16+SR", "bert-large", 1, 1, 32, 16, 16384, 128, "bf16", None, 2846, _SDK23),
    PublishedRow("GPT3-6.7B TP8xDP4 BF16+SR", "gpt3-6.7b", 8, 1, 4, 1, 64, 2048, "bf16", None, 7.3, _SDK23),
    # the FP32 row only gives the BF16/FP32 ratio; SDK 2.3 auto-cast FP32 matmuls to BF16 by default
    PublishedRow("BERT-Large Ph1 DP32 FP32", "bert-large", 1, 1, 32, 16, 16384, 128, "fp32", "matmult", 1864, _SDK23),
)


def published_request(row: PublishedRow) -> JobRequest:
    return JobRequest(
        model=row.model,
        tp=row.tp,
        pp=row.pp,
        dp=row.dp,
        micro_batch=row.micro_batch,
        global_batch=row.global_batch,
        seq_len=row.seq_len,
        dtype=row.dtype,
        auto_cast=row.auto_cast,
    )
