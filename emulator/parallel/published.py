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
    era: str = "2.3"  # the Neuron SDK release the row was published with


_SDK23 = "Neuron SDK 2.3 tutorials and the re:Invent 2022 Trainium deck (docs/parallel.md)"
# the 2022 rows as the compiler efficiency was fitted on them: every memory switch off, whatever
# the models' recipes say (the BERT row is to move to its published micro-batch 8, with FP32
# optimizer parameters, when the SDK eras are refitted: docs/parallel.md §Host share and calibration)
_OFF = JobRequest(
    "", zero1=False, recompute="none", sequence_parallel=False, flash_attention=False, master_weights=False
)
_BERT_PH1 = replace(
    _OFF, model="bert-large", tp=1, pp=1, dp=32, micro_batch=16, global_batch=16384, seq_len=128, dtype="bf16"
)
_GPT3_TP8 = replace(
    _OFF, model="gpt3-6.7b", tp=8, pp=1, dp=4, micro_batch=1, global_batch=64, seq_len=2048, dtype="bf16"
)
PUBLISHED_ROWS = (
    PublishedRow("BERT-Large Ph1 DP32 BF16+SR", _BERT_PH1, 2846, _SDK23),
    PublishedRow("GPT3-6.7B TP8xDP4 BF16+SR", _GPT3_TP8, 7.3, _SDK23),
    # the FP32 row only gives the BF16/FP32 ratio; SDK 2.3 auto-cast FP32 matmuls to BF16 by default
    PublishedRow("BERT-Large Ph1 DP32 FP32", replace(_BERT_PH1, dtype="fp32", auto_cast="matmult"), 1864, _SDK23),
    # the LLM rows of later releases, as issue 22 gives them, each at its model's published recipe
    # (emulator/workloads/models/recipes.py); not yet calibrated: the SDK eras are not modelled yet
    PublishedRow(
        "GPT3-46B 32 nodes TP8xPP8 BF16+SR",
        JobRequest("gpt3-46b", published_scale=True),
        48.24,
        "issue 22 (Neuron SDK 2.18)",
        "2.18",
    ),
    PublishedRow(
        "Llama2-13B 32 nodes TP8xPP4 FP32 opt",
        JobRequest("llama2-13b", published_scale=True),
        87.44,
        "issue 22 (Neuron SDK 2.18)",
        "2.18",
    ),
    PublishedRow(
        "Llama2-7B 16 nodes TP8 FP32 opt",
        JobRequest("llama2-7b", published_scale=True),
        95.14,
        "issue 22 (Neuron SDK 2.21)",
        "2.21",
    ),
)
