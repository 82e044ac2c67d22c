"""The published Trn1 training recipe of each model-scale model (torch-free): the layout, batch,
sequence and memory/kernel switches of the run AWS published for it, with the configuration file
each comes from (docs/models.md §Recipes). ``run`` and ``bench`` default to a model's recipe;
every switch has an on/off flag (docs/parallel.md)."""

from __future__ import annotations

from dataclasses import dataclass

RECOMPUTE = ("none", "selective", "full")  # activation recomputation (NeMo's activations_checkpoint_granularity)
# what of the MLP selective recomputation recomputes too: nothing, its activation (NxD's
# modeling_llama_nxd.py activation_mlp) or the whole module (NxD/NxDT LlamaMLP in the checkpointed modules)
RECOMPUTE_MLP = ("none", "activation", "module")
# the memory and kernel switches, by their JobRequest / ParallelConfig names, each off
SWITCHES_OFF: dict[str, object] = {
    "zero1": False,
    "recompute": "none",
    "recompute_mlp": "none",
    "sequence_parallel": False,
    "flash_attention": False,
    "master_weights": False,
}
CORES_PER_NODE = 32  # NeuronCores of a trn1.32xlarge / trn1n.32xlarge, the instance every recipe runs on


@dataclass(frozen=True)
class Recipe:
    """A model's published Trn1 training run: where every setting comes from is ``source``."""

    nodes: int  # trn1.32xlarge instances
    tp: int
    pp: int
    micro_batch: int
    global_batch: int
    seq_len: int
    recompute: str  # one of RECOMPUTE
    sequence_parallel: bool
    zero1: bool
    flash_attention: bool
    master_weights: bool  # mixed precision: FP32 master weights and AdamW moments (else BF16 + stochastic rounding)
    sdk: str  # the Neuron SDK release the configuration belongs to
    label: str  # the configuration, briefly: "neuronx-distributed tp_zero1_llama_hf_pretrain"
    source: str  # every file each setting comes from
    recompute_mlp: str = "none"  # one of RECOMPUTE_MLP (with selective recomputation)

    @property
    def dp(self) -> int:
        return self.nodes * CORES_PER_NODE // (self.tp * self.pp)

    def switches(self) -> dict[str, object]:
        """The memory and kernel switches (:data:`SWITCHES_OFF`'s names) as the recipe sets them."""
        return {name: getattr(self, name) for name in SWITCHES_OFF}


_NNM = "aws-neuron/neuronx-nemo-megatron@f4743ce nemo/examples/nlp/language_modeling"
_NNM_COMMON = (
    "test.sh (UBS=1, GBS = GBS_MULTIPLE x nodes, sequence_parallel=True, wrap_with_zero=false under bf16SR, "
    "no use_flash_attention: megatron_gpt_model.py defaults it to False) and train_setup.sh "
    "(training_precision=bf16SR: XLA_USE_BF16=1, NEURON_RT_STOCHASTIC_ROUNDING_EN=1, AdamW, megatron_amp_O2=false)"
)
_NXD = "aws-neuron/neuronx-distributed@fbac349 examples/training/llama"
_NXD_PRECISION = (
    "use_gpu_compatible_precision (default 1): mixed_precision_config use_master_weights=True, "
    "use_fp32_grad_acc=True, stochastic rounding off"
)
_NXDT = "aws-neuron/neuronx-distributed-training@9169aa0 examples/conf"
# what makes the Llama 2 recipes' recompute_mlp "activation" (the example's model code)
_NXD_MLP = "modeling_llama_nxd.py's selective_checkpoint_enabled also checkpoints the MLP activation (activation_mlp)"

RECIPES: dict[str, Recipe] = {
    "bert-large": Recipe(
        nodes=1,
        tp=1,
        pp=1,
        micro_batch=16,
        global_batch=16384,
        seq_len=128,
        recompute="none",
        sequence_parallel=False,
        zero1=False,
        flash_attention=False,
        master_weights=True,
        sdk="2.3",
        label="aws-neuron-samples dp_bert_hf_pretrain, phase 1",
        source=(
            "aws-neuron/aws-neuron-samples@2015d65 torch-neuronx/training/dp_bert_hf_pretrain/"
            "run_dp_bert_large_hf_pretrain_bf16_s128.sh: 32 workers on one trn1.32xlarge, sequence 128, global "
            "batch 16384, BF16 model with FP32 optimizer parameters (AdamW_FP32OptimParams) and stochastic "
            "rounding; micro-batch 16 with accumulation 32, as the SDK 2.3 tutorial (aws-neuron-sdk@7060a1c6 "
            "frameworks/torch/torch-neuronx/tutorials/training/bert.rst) ran it with XLA_USE_BF16=1 (its FP32 "
            "runs: micro-batch 8, 'optimal ... 8 for FP32 and 16 for full BF16')"
        ),
    ),
    "gpt3-6.7b": Recipe(
        nodes=1,
        tp=8,
        pp=1,
        micro_batch=1,
        global_batch=64,
        seq_len=2048,
        recompute="none",
        sequence_parallel=False,
        zero1=False,
        flash_attention=False,
        master_weights=False,
        sdk="2.3",
        label="the SDK 2.3 GPT-3 6.7B row (Megatron-LM tutorial)",
        source=(
            "the Neuron SDK 2.3 launch row: TP 8 x DP 4 on one trn1.32xlarge, micro-batch 1, global batch 64, "
            "sequence 2048, BF16 + stochastic rounding; that tutorial's memory switches were not found in the "
            "public configuration files (the later neuronx-nemo-megatron gpt_6.7b.sh uses full recomputation)"
        ),
    ),
    "gpt3-23b": Recipe(
        nodes=32,
        tp=8,
        pp=4,
        micro_batch=1,
        global_batch=1024,
        seq_len=2048,
        recompute="selective",
        sequence_parallel=True,
        zero1=False,
        flash_attention=False,
        master_weights=False,
        sdk="2.18",
        label="neuronx-nemo-megatron gpt_23b.sh",
        source=f"{_NNM}/gpt_23b.sh (TP 8, PP 4, SEQ_LENGTH 2048, activations_checkpoint_granularity=selective); "
        f"{_NNM_COMMON}; 32 nodes as the published row",
    ),
    "gpt3-46b": Recipe(
        nodes=32,
        tp=8,
        pp=8,
        micro_batch=1,
        global_batch=1024,
        seq_len=2048,
        recompute="full",
        sequence_parallel=True,
        zero1=False,
        flash_attention=False,
        master_weights=False,
        sdk="2.18",
        label="neuronx-nemo-megatron gpt_46b.sh",
        source=f"{_NNM}/gpt_46b.sh (TP 8, PP 8, SEQ_LENGTH 2048, activations_checkpoint_granularity=full); "
        f"{_NNM_COMMON}; 32 nodes as the published row",
    ),
    "gpt3-175b": Recipe(
        nodes=32,
        tp=32,
        pp=8,
        micro_batch=1,
        global_batch=256,
        seq_len=2048,
        recompute="selective",
        sequence_parallel=True,
        zero1=False,
        flash_attention=False,
        master_weights=False,
        sdk="2.18",
        label="neuronx-nemo-megatron gpt_175b.sh",
        source=f"{_NNM}/gpt_175b.sh (TP 32, PP 8, SEQ_LENGTH 2048, GBS_MULTIPLE 8, selective); {_NNM_COMMON}; "
        "32 nodes as the published row",
    ),
    "llama2-7b": Recipe(
        nodes=16,
        tp=8,
        pp=1,
        micro_batch=1,
        global_batch=1024,
        seq_len=4096,
        recompute="selective",
        sequence_parallel=True,
        zero1=True,
        flash_attention=True,
        master_weights=True,
        sdk="2.21",
        label="neuronx-distributed tp_zero1_llama_hf_pretrain",
        source=(
            f"{_NXD}/tp_zero1_llama_hf_pretrain/tp_zero1_llama2_7B_hf_pretrain.sh (TP 8, GBS 1024, MBS 1, SEQ_LEN "
            "4096, --selective_checkpoint_enabled, --sequence_parallel_enabled, USE_ZERO_1=1, USE_MIX_PRECISION=1) "
            "and tp_zero1_llama_hf_pretrain.py (--use_flash_attention 1 by default; "
            f"{_NXD_PRECISION}); 16 nodes as the published row; "
            f"{_NXD_MLP}"
        ),
        recompute_mlp="activation",
    ),
    "llama2-13b": Recipe(
        nodes=32,
        tp=8,
        pp=4,
        micro_batch=1,
        global_batch=1024,
        seq_len=4096,
        recompute="selective",
        sequence_parallel=True,
        zero1=True,
        flash_attention=False,
        master_weights=True,
        sdk="2.18",
        label="neuronx-distributed tp_pp_llama_hf_pretrain, 13B",
        source=(
            f"{_NXD}/tp_pp_llama_hf_pretrain/run_llama2_13B_tp_pp.sh (TP 8, PP 4, GBS 1024, SEQ_LEN 4096, "
            "--use_selective_checkpoint 1, --use_zero1_optimizer 1; 32 nodes: the SDK tutorial's sbatch) and "
            f"run_llama_nxd.py (sequence parallel by default, flash attention off by default; {_NXD_PRECISION}); "
            f"{_NXD_MLP}"
        ),
        recompute_mlp="activation",
    ),
    "llama2-70b": Recipe(
        nodes=32,
        tp=32,
        pp=4,
        micro_batch=1,
        global_batch=1024,
        seq_len=4096,
        recompute="selective",
        sequence_parallel=True,
        zero1=True,
        flash_attention=False,
        master_weights=True,
        sdk="2.18",
        label="neuronx-distributed tp_pp_llama_hf_pretrain, 70B",
        source=(
            f"{_NXD}/tp_pp_llama_hf_pretrain/run_llama2_70B_tp_pp.sh (TP 32, kv_replicator 4, GBS 1024, SEQ_LEN "
            "4096, selective checkpointing, ZeRO-1; its PP is 8) and run_llama_nxd.py (sequence parallel on, flash "
            f"attention off by default; {_NXD_PRECISION}); 32 nodes with PP 4 as the published row; "
            f"{_NXD_MLP}"
        ),
        recompute_mlp="activation",
    ),
    "llama3.1-8b": Recipe(
        nodes=32,
        tp=32,
        pp=1,
        micro_batch=1,
        global_batch=1024,
        seq_len=8192,
        recompute="selective",
        sequence_parallel=True,
        zero1=True,
        flash_attention=True,
        master_weights=True,
        sdk="2.24",
        label="neuronx-distributed-training hf_llama3.1_8B_config.yaml",
        source=(
            f"{_NXDT}/hf_llama3.1_8B_config.yaml (num_nodes 32, TP 32, PP 1, zero1, sequence_parallel, "
            "kv_replicator 4, micro-batch 1, global batch 1024, seq 8192, selective [CoreAttention, LlamaMLP], "
            "fusions.flash_attention True, precision mixed_precision); the NxD tutorial runs it on 4 nodes"
        ),
        recompute_mlp="module",
    ),
    "llama3.1-70b": Recipe(
        nodes=32,
        tp=32,
        pp=8,
        micro_batch=1,
        global_batch=1024,
        seq_len=8192,
        recompute="selective",
        sequence_parallel=True,
        zero1=True,
        flash_attention=True,
        master_weights=True,
        sdk="2.24",
        label="neuronx-distributed-training hf_llama3.1_70B_config.yaml",
        source=(
            f"{_NXDT}/hf_llama3.1_70B_config.yaml (num_nodes 32, TP 32, PP 8, zero1, sequence_parallel, "
            "kv_replicator 4, micro-batch 1, global batch 1024, seq 8192, selective [CoreAttention, LlamaMLP], "
            f"flash_attention True, mixed_precision); {_NXD}/tp_pp_llama_hf_pretrain/run_llama3_70B_tp_pp.sh alike"
        ),
        recompute_mlp="module",
    ),
}
