"""Inputs for neuronx-distributed's Llama pre-training examples on a machine that cannot
download them.

    python scripts/llama_pretrain_offline.py DIR [--seq-len 2048] [--sequences 256] [--heads 8]

The examples (``examples/training/llama/tp_zero1_llama_hf_pretrain``, ``tp_pp_llama_hf_pretrain``)
read a model configuration directory (``--model_path``: a Hugging Face ``config.json``) and a
tokenized dataset saved with ``datasets.Dataset.save_to_disk`` (``--data_dir``: columns
``input_ids``, ``attention_mask``, ``labels`` of ``seq_len`` tokens). This writes, under DIR:

- ``config/config.json``: a tiny Llama 2 configuration (2 layers, hidden 256, ``--heads`` query and
  key/value heads, vocabulary 1,024, BF16) — the examples build a fresh model from it;
- ``data/``: generated sequences in the examples' format, each following one rule (every token is
  the one before it times 5 plus 3, modulo the vocabulary) from a random first token, so the loss
  can fall.

It needs ``datasets`` (the examples' requirements.txt). Then, with the examples' requirements on
the path and an emulated trn1.32xlarge running (docs/run-your-script.md §Checked with the public
samples):

    neuron-emulator exec -- torchrun --nproc_per_node=8 tp_zero1_llama_hf_pretrain.py \\
        --model_path DIR/config --data_dir DIR/data --tensor_parallel_size 8 --batch_size 1 \\
        --steps_this_run 6 --max_steps 100 --warmup_steps 2 --grad_accum_usteps 1 --seq_len 2048 \\
        --use_zero_1 --use_mix_precision --sequence_parallel_enabled --selective_checkpoint_enabled
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

VOCAB = 1024


def tiny_config(heads: int, seq_len: int) -> dict:
    """A Llama 2 configuration (the 7B example's keys) scaled down to run on a laptop."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": 256,
        "initializer_range": 0.02,
        "intermediate_size": 512,
        "max_position_embeddings": seq_len,
        "model_type": "llama",
        "num_attention_heads": heads,
        "num_hidden_layers": 2,
        "num_key_value_heads": heads,
        "pad_token_id": 0,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": VOCAB,
        # the examples' configurations carry these two (their scripts set them only when asked)
        "sequence_parallel_enabled": False,
        "selective_checkpoint_enabled": False,
    }


def sequences(count: int, seq_len: int, seed: int = 0) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(count):
        token, seq = rng.randrange(VOCAB), []
        for _ in range(seq_len):
            seq.append(token)
            token = (token * 5 + 3) % VOCAB
        out.append(seq)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument(
        "--seq-len", type=int, default=2048, help="tokens per sequence (the flash kernel needs a multiple of 2048)"
    )
    parser.add_argument("--sequences", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8, help="query (and key/value) heads: a multiple of the TP size")
    args = parser.parse_args(argv)
    if args.seq_len < 2 or args.sequences < 1 or args.heads < 1 or 256 % args.heads:
        print("llama_pretrain_offline: --seq-len >= 2, --sequences >= 1, --heads dividing 256", file=sys.stderr)
        return 2
    try:
        import datasets
    except ImportError:
        print("llama_pretrain_offline: needs the 'datasets' package (the examples' requirements.txt)", file=sys.stderr)
        return 1
    (args.dir / "config").mkdir(parents=True, exist_ok=True)
    (args.dir / "config" / "config.json").write_text(json.dumps(tiny_config(args.heads, args.seq_len), indent=2))
    ids = sequences(args.sequences, args.seq_len)
    data = datasets.Dataset.from_dict(
        {"input_ids": ids, "attention_mask": [[1] * args.seq_len] * len(ids), "labels": ids}
    )
    data.save_to_disk(str(args.dir / "data"))
    print(f"wrote {args.dir / 'config'} and {len(ids)} sequences of {args.seq_len} tokens to {args.dir / 'data'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
