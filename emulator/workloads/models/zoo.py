"""The model-scale models: full-size models with published Trn1 training results (torch-free).

Each :class:`ModelSpec` gives a model's dimensions and where they come from (its published
training recipe is :mod:`emulator.workloads.models.recipes`); the functions here derive what
follows from the dimensions alone (padded vocabulary, parameter count, tensor-parallel key/value
layout, the layouts a model accepts).
The one model code that builds them is :mod:`emulator.parallel.models` (a pipeline stage on
``meta``); ``docs/models.md`` has the table, the sources and the tensor-parallel layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "MODELS",
    "ModelSpec",
    "count_parameters",
    "kv_layout",
    "padded_vocab",
    "tokens_per_sample",
    "validate",
]


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str  # "bert" | "gpt" | "llama" | "vit"
    layers: int
    hidden: int
    heads: int
    kv_heads: int  # = heads without grouped-query attention
    ffn: int  # MLP width (per branch for SwiGLU)
    vocab: int  # tokenizer vocabulary before padding (0 for ViT)
    max_seq_len: int  # learned position table size / context length (ViT: 1 + patches)
    default_seq_len: int  # the sequence length of the published Trn1 runs
    sample_unit: str  # "seq" or "images"
    description: str
    source: str  # where every number above comes from
    published_params: int  # the model size as its source states it
    # architecture
    norm: str = "layernorm"  # "layernorm" | "rmsnorm"
    norm_eps: float = 1e-5
    activation: str = "gelu"  # "gelu" | "swiglu"
    position: str = "learned"  # "learned" | "rope"
    rope_theta: float = 10000.0
    rope_scaling: tuple[float, float, float, int] | None = None  # Llama 3.1: factor, low, high, original ctx
    bias: bool = True
    fused_qkv: bool = True
    causal: bool = True
    post_norm: bool = False  # BERT: norm after the residual add
    embedding_norm: bool = False  # BERT: LayerNorm on the summed embeddings
    tied_output: bool = True  # LM head shares the word embedding
    # Vocabulary padding: to a multiple of vocab_multiple * tp (Megatron's
    # make-vocab-size-divisible-by); 0 = no padding, the vocabulary must divide by tp (HF + NxD).
    vocab_multiple: int = 0
    type_vocab: int = 0  # BERT token types (segments)
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    # ViT
    image_size: int = 0
    patch_size: int = 0
    channels: int = 3
    num_classes: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


_GPT3 = "Brown et al. 2020, 'Language Models are Few-Shot Learners', table 2.1"
_NEMO = "github.com/aws-neuron/neuronx-nemo-megatron nemo/examples/nlp/language_modeling"
_GPT_COMMON = (
    f"FFN = 4 x hidden ({_NEMO}/test.sh: FFN_HS=$(($HS*4))); GPT-2 BPE vocabulary of 50257 tokens "
    "(gpt2-vocab.json), padded to a multiple of 128 x tp (conf/megatron_gpt_config.yaml "
    "make_vocab_size_divisible_by: 128); hidden and attention dropout 0.1, LayerNorm eps 1e-5 "
    "(same config); learned positions, pre-LN, GELU, fused QKV with biases, output tied to the embedding"
)
_LLAMA2 = "Touvron et al. 2023, 'Llama 2: Open Foundation and Fine-Tuned Chat Models'"
_NXD = "github.com/aws-neuron/neuronx-distributed examples/training/llama"


def _gpt3(name: str, layers: int, hidden: int, heads: int, published: int, source: str, desc: str) -> ModelSpec:
    return ModelSpec(
        *(name, "gpt", layers, hidden, heads, heads, 4 * hidden, 50257, 2048, 2048, "seq", desc),
        f"{source}; {_GPT_COMMON}",
        published,
        vocab_multiple=128,
        hidden_dropout=0.1,
        attention_dropout=0.1,
    )


def _llama(
    name: str,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    ffn: int,
    vocab: int,
    max_seq: int,
    seq: int,
    published: int,
    source: str,
    desc: str,
    *,
    rope_theta: float = 10000.0,
    rope_scaling: tuple[float, float, float, int] | None = None,
) -> ModelSpec:
    return ModelSpec(
        *(name, "llama", layers, hidden, heads, kv_heads, ffn, vocab, max_seq, seq, "seq", desc, source, published),
        norm="rmsnorm",
        norm_eps=1e-5,
        activation="swiglu",
        position="rope",
        rope_theta=rope_theta,
        rope_scaling=rope_scaling,
        bias=False,
        tied_output=False,
        vocab_multiple=0,
    )


def _llama31(*args: Any) -> ModelSpec:
    """``_llama`` with Llama 3.1's RoPE: theta 500000, llama3 scaling factor 8 / 1 / 4 / 8192 (config.json)."""
    return _llama(*args, rope_theta=500000.0, rope_scaling=(8.0, 1.0, 4.0, 8192))


# ModelSpec's first fields: name, family, layers, hidden, heads, kv_heads, ffn, vocab, max_seq_len,
# default_seq_len, sample_unit, description, source, published_params
MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            *("bert-large", "bert", 24, 1024, 16, 16, 4096, 30522, 512, 128, "seq"),
            "BERT-Large (HF BertForPreTraining: MLM + NSP heads), phase 1 pre-training",
            (
                "Devlin et al. 2018 (BERT-Large: 24 layers, hidden 1024, 16 heads, 340M parameters); "
                "huggingface.co/bert-large-uncased config.json (intermediate_size 4096, vocab_size 30522, "
                "max_position_embeddings 512, type_vocab_size 2, hidden/attention dropout 0.1, "
                "layer_norm_eps 1e-12, gelu); sequence 128: the Neuron BERT-Large phase 1 tutorial. "
                "Vocabulary padded to a multiple of tp only when tp does not divide it (Megatron BERT pads)"
            ),
            340_000_000,
            norm_eps=1e-12,
            causal=False,
            post_norm=True,
            embedding_norm=True,
            fused_qkv=False,
            vocab_multiple=1,
            type_vocab=2,
            hidden_dropout=0.1,
            attention_dropout=0.1,
        ),
        _gpt3(
            "gpt3-6.7b",
            32,
            4096,
            32,
            6_700_000_000,
            f"{_GPT3} (GPT-3 6.7B: 32 layers, d_model 4096, 32 heads, context 2048); {_NEMO}/gpt_6.7b.sh",
            "GPT-3 6.7B (Megatron-LM GPT), as in the Neuron Megatron-LM and NeMo Megatron Trn1 tutorials",
        ),
        _gpt3(
            "gpt3-23b",
            28,
            8192,
            64,
            23_000_000_000,
            f"{_NEMO}/gpt_23b.sh (SEQ_LENGTH 2048, HS 8192, N_LAYERS 28, N_AH 64; TP 8, PP 4)",
            "GPT-3 23B as AWS trains it on Trn1 with neuronx-nemo-megatron",
        ),
        _gpt3(
            "gpt3-46b",
            56,
            8192,
            64,
            46_000_000_000,
            f"{_NEMO}/gpt_46b.sh (SEQ_LENGTH 2048, HS 8192, N_LAYERS 56, N_AH 64; TP 8, PP 8)",
            "GPT-3 46B as AWS trains it on Trn1 with neuronx-nemo-megatron",
        ),
        _gpt3(
            "gpt3-175b",
            96,
            12288,
            96,
            175_000_000_000,
            f"{_GPT3} (GPT-3 175B: 96 layers, d_model 12288, 96 heads, context 2048); {_NEMO}/gpt_175b.sh",
            "GPT-3 175B (Megatron GPT)",
        ),
        _llama(
            "llama2-7b",
            32,
            4096,
            32,
            32,
            11008,
            32000,
            4096,
            4096,
            6_738_415_616,
            f"{_LLAMA2}; huggingface.co/meta-llama/Llama-2-7b-hf config.json (hidden 4096, intermediate 11008, "
            "32 layers, 32 heads, vocab 32000, max_position_embeddings 4096, rms_norm_eps 1e-5); "
            f"{_NXD}/tp_zero1_llama_hf_pretrain (7B_config_llama2, SEQ_LEN 4096, TP 8); "
            "size: 6.74B, the checkpoint's parameter count (named '7B')",
            "Llama 2 7B",
        ),
        _llama(
            "llama2-13b",
            40,
            5120,
            40,
            40,
            13824,
            32000,
            4096,
            4096,
            13_015_864_320,
            f"{_LLAMA2}; huggingface.co/meta-llama/Llama-2-13b-hf config.json (hidden 5120, intermediate 13824, "
            f"40 layers, 40 heads, vocab 32000); {_NXD}/tp_pp_llama_hf_pretrain (13B_config_llama2, "
            "SEQ_LEN 4096, TP 8, PP 4); size: 13.0B, the checkpoint's parameter count",
            "Llama 2 13B",
        ),
        _llama(
            "llama2-70b",
            80,
            8192,
            64,
            8,
            28672,
            32000,
            4096,
            4096,
            68_976_648_192,
            f"{_LLAMA2}; huggingface.co/meta-llama/Llama-2-70b-hf config.json and {_NXD}/tp_pp_llama_hf_pretrain/"
            "70B_config_llama2 (hidden 8192, intermediate 28672, 80 layers, 64 heads, 8 KV heads, vocab 32000); "
            "run_llama2_70B_tp_pp.sh: SEQ_LEN 4096, TP 32, PP 8, kv_replicator 4; size: 69.0B, the "
            "checkpoint's parameter count (named '70B')",
            "Llama 2 70B (grouped-query attention)",
        ),
        _llama31(
            "llama3.1-8b",
            32,
            4096,
            32,
            8,
            14336,
            128256,
            131072,
            8192,
            8_030_261_248,
            "Meta Llama 3.1 model card; huggingface.co/meta-llama/Llama-3.1-8B config.json and "
            f"{_NXD}/tp_zero1_llama_hf_pretrain/8B_config_llama3.1 (hidden 4096, intermediate 14336, 32 layers, "
            "32 heads, 8 KV heads, vocab 128256, rope_theta 500000, llama3 rope scaling factor 8 / 1 / 4 / 8192, "
            "max_position_embeddings 131072); tp_zero1_llama3_8B_hf_pretrain.sh: SEQ_LEN 8192, TP 32, "
            "kv_replicator 4; size: 8.03B, the checkpoint's parameter count",
            "Llama 3.1 8B (grouped-query attention)",
        ),
        _llama31(
            "llama3.1-70b",
            80,
            8192,
            64,
            8,
            28672,
            128256,
            131072,
            8192,
            70_553_706_496,
            "Meta Llama 3.1 model card; huggingface.co/meta-llama/Llama-3.1-70B config.json and "
            f"{_NXD}/tp_pp_llama_hf_pretrain/70B_config_llama3.1 (hidden 8192, intermediate 28672, 80 layers, "
            "64 heads, 8 KV heads, vocab 128256, rope_theta 500000, llama3 rope scaling); run_llama3_70B_tp_pp.sh: "
            "SEQ_LEN 8192, TP 32, PP 8, kv_replicator 4; size: 70.6B, the checkpoint's parameter count",
            "Llama 3.1 70B (grouped-query attention)",
        ),
        ModelSpec(
            *("vit-base", "vit", 12, 768, 12, 12, 3072, 0, 197, 197, "images"),
            "ViT-B/16 image classifier, 224x224 images, 1000 classes",
            (
                "Dosovitskiy et al. 2021, 'An Image is Worth 16x16 Words', table 1 (ViT-Base: 12 layers, hidden 768, "
                "MLP 3072, 12 heads, 86M parameters); huggingface.co/google/vit-base-patch16-224 config.json "
                "(image 224, patch 16, 1000 ImageNet-1k labels, layer_norm_eps 1e-12, dropout 0.0). The Neuron "
                "tutorial's class count was not found: 1000 (ImageNet-1k) is used"
            ),
            86_000_000,
            norm_eps=1e-12,
            causal=False,
            vocab_multiple=0,
            image_size=224,
            patch_size=16,
            num_classes=1000,
        ),
    )
}


def kv_layout(heads: int, kv_heads: int, tp: int) -> tuple[int, int]:
    """(key/value heads per rank, replication factor). KV heads split over tp when tp divides
    them; when tp is a multiple of them each is replicated ``tp / kv_heads`` times (one per
    rank), as NxD's GQA QKV layer (``kv_size_multiplier``) does."""
    if kv_heads % tp == 0:
        return kv_heads // tp, 1
    if tp % kv_heads == 0 and heads % tp == 0:
        return 1, tp // kv_heads
    raise ValueError(
        f"{kv_heads} key/value heads neither split over tensor-parallel size {tp} nor replicate evenly to it"
    )


def padded_vocab(spec: ModelSpec, tp: int = 1) -> int:
    """The embedding rows the model has at tensor-parallel size ``tp``."""
    if spec.vocab_multiple <= 0:
        return spec.vocab
    multiple = spec.vocab_multiple * tp
    return -(-spec.vocab // multiple) * multiple


def count_parameters(spec: ModelSpec, tp: int = 1) -> int:
    """Full-model parameters, unsharded (the vocabulary as padded for ``tp``; replicated KV heads
    counted once)."""
    h, f, hd = spec.hidden, spec.ffn, spec.head_dim
    norm = 2 * h if spec.norm == "layernorm" else h
    q, kv = spec.heads * hd, spec.kv_heads * hd
    attention = h * (q + 2 * kv) + q * h + ((q + 2 * kv) + h if spec.bias else 0)
    if spec.activation == "swiglu":
        mlp = 3 * h * f + (2 * f + h if spec.bias else 0)
    else:
        mlp = 2 * h * f + (f + h if spec.bias else 0)
    total = spec.layers * (attention + mlp + 2 * norm)
    if spec.family == "vit":
        patches = (spec.image_size // spec.patch_size) ** 2
        total += spec.channels * spec.patch_size**2 * h + h + h + (patches + 1) * h  # conv, cls, positions
        return total + norm + h * spec.num_classes + spec.num_classes
    vocab = padded_vocab(spec, tp)
    total += vocab * h
    if spec.position == "learned":
        total += spec.max_seq_len * h
    total += spec.type_vocab * h + (norm if spec.embedding_norm else 0)
    if spec.family == "bert":  # MLM transform + norm + decoder bias, pooler, NSP classifier
        return total + (h * h + h) + norm + vocab + (h * h + h) + (2 * h + 2)
    total += norm  # final norm
    return total if spec.tied_output else total + vocab * h


def tokens_per_sample(spec: ModelSpec, seq_len: int) -> int:
    """Tokens one sample feeds the model: the sequence length; for ViT an image's patches + CLS."""
    if spec.family == "vit":
        return (spec.image_size // spec.patch_size) ** 2 + 1
    return seq_len


def validate(spec: ModelSpec, tp: int, pp: int, seq_len: int, *, sequence_parallel: bool = False) -> None:
    """ValueError (one line) when ``spec`` cannot run with this tp/pp/sequence length."""
    name = spec.name
    if tp < 1 or pp < 1:
        raise ValueError(f"{name}: tensor- and pipeline-parallel sizes must be at least 1 (got tp={tp}, pp={pp})")
    if spec.heads % tp:
        raise ValueError(f"{name}: {spec.heads} attention heads do not split over tensor-parallel size {tp}")
    try:
        kv_layout(spec.heads, spec.kv_heads, tp)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    if spec.ffn % tp:
        raise ValueError(f"{name}: FFN size {spec.ffn} is not divisible by tensor-parallel size {tp}")
    if spec.family != "vit" and padded_vocab(spec, tp) % tp:
        raise ValueError(f"{name}: vocabulary of {spec.vocab} is not divisible by tensor-parallel size {tp}")
    if spec.layers % pp:
        raise ValueError(f"{name}: {spec.layers} layers do not split evenly over {pp} pipeline stages")
    if spec.family == "vit":
        if seq_len != spec.max_seq_len:
            raise ValueError(
                f"{name}: sequence length is fixed by the image size: {spec.max_seq_len} tokens "
                f"(1 + ({spec.image_size}/{spec.patch_size})^2), got {seq_len}"
            )
    elif not 1 <= seq_len <= spec.max_seq_len:
        raise ValueError(f"{name}: sequence length {seq_len} is outside 1..{spec.max_seq_len}")
    if sequence_parallel and tp > 1 and seq_len % tp:
        raise ValueError(
            f"{name}: sequence parallelism needs the sequence length ({seq_len}) divisible by tensor-parallel size {tp}"
        )
