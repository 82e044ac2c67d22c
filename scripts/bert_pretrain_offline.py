"""Inputs for the public BERT pretraining samples on a machine that cannot download them.

    python scripts/bert_pretrain_offline.py DIR [--shards 2] [--sequences 512]

The Neuron samples' ``tp_dp_bert_large_hf_pretrain_hdf5.py`` (aws-neuron-samples and
neuronx-distributed) read pre-tokenized HDF5 shards and take their model configuration from the
Hugging Face hub (``BertForPreTraining.from_pretrained("bert-large-uncased")``, then a fresh
model is built from that configuration). This writes, under DIR:

- ``data/wiki_<i>_training_<i>.hdf5``: shards in the samples' format (input_ids, input_mask,
  segment_ids, masked_lm_positions, masked_lm_ids, next_sentence_labels; sequence length 128,
  20 masked positions), generated: each sequence repeats a 4-token pattern, so the masked tokens
  can be learnt and the loss falls;
- ``hf/``: a Hugging Face cache holding bert-large-uncased's published configuration and an
  empty weights file (the sample only reads the configuration).

Then, with the sample's pinned transformers on the path (its requirements.txt) and the emulated
instance running (docs/run-your-script.md §Checked with the public samples):

    HF_HOME=DIR/hf HF_HUB_OFFLINE=1 neuron-emulator exec -- torchrun --nproc_per_node=2 \\
        tp_dp_bert_large_hf_pretrain_hdf5.py --debug --data_dir DIR/data --tensor_parallel_size 2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SEQUENCE, MASKED = 128, 20
# bert-large-uncased's configuration as published with the model (24 layers, hidden 1024, 16 heads)
BERT_LARGE_UNCASED = {
    "architectures": ["BertForMaskedLM"],
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 4096,
    "layer_norm_eps": 1e-12,
    "max_position_embeddings": 512,
    "model_type": "bert",
    "num_attention_heads": 16,
    "num_hidden_layers": 24,
    "pad_token_id": 0,
    "type_vocab_size": 2,
    "vocab_size": 30522,
}


def write_shards(data: Path, shards: int, sequences: int) -> None:
    import h5py
    import numpy as np

    rng = np.random.default_rng(0)
    data.mkdir(parents=True, exist_ok=True)
    for shard in range(shards):
        ids = np.empty((sequences, SEQUENCE), dtype=np.int64)
        ids[:, 0] = 101  # [CLS]
        first = rng.integers(1000, 2000, size=(sequences, 1))
        ids[:, 1:] = first + (np.arange(1, SEQUENCE) % 4)
        positions = np.zeros((sequences, MASKED), dtype=np.int64)
        labels = np.zeros((sequences, MASKED), dtype=np.int64)
        for i in range(sequences):
            chosen = np.sort(rng.choice(np.arange(1, SEQUENCE), size=MASKED, replace=False))
            positions[i], labels[i] = chosen, ids[i, chosen]
            ids[i, chosen] = 103  # [MASK]
        with h5py.File(data / f"wiki_{shard}_training_{shard}.hdf5", "w") as f:
            f["input_ids"] = ids
            f["input_mask"] = np.ones((sequences, SEQUENCE), dtype=np.int64)
            f["segment_ids"] = np.zeros((sequences, SEQUENCE), dtype=np.int64)
            f["masked_lm_positions"] = positions
            f["masked_lm_ids"] = labels
            f["next_sentence_labels"] = rng.integers(0, 2, size=(sequences,))


def write_hub_cache(hf_home: Path) -> None:
    import torch

    model = hf_home / "hub" / "models--bert-large-uncased"
    revision = "0" * 40
    snapshot = model / "snapshots" / revision
    snapshot.mkdir(parents=True, exist_ok=True)
    (model / "refs").mkdir(exist_ok=True)
    (model / "refs" / "main").write_text(revision)
    (snapshot / "config.json").write_text(json.dumps(BERT_LARGE_UNCASED, indent=2))
    torch.save({}, snapshot / "pytorch_model.bin")  # no weights: the model is initialised from the config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="where to write data/ and hf/")
    parser.add_argument("--shards", type=int, default=2, help="HDF5 shards (default 2)")
    parser.add_argument("--sequences", type=int, default=512, help="sequences per shard (default 512)")
    args = parser.parse_args(argv)
    if args.shards < 1 or args.sequences < 1:
        parser.error("--shards and --sequences must be at least 1")
    try:
        write_shards(args.dir / "data", args.shards, args.sequences)
    except ImportError:
        print("bert_pretrain_offline: h5py is needed (pip install h5py; the sample needs it too)", file=sys.stderr)
        return 1
    write_hub_cache(args.dir / "hf")
    print(f"data: {args.dir / 'data'}\nHF_HOME: {args.dir / 'hf'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
