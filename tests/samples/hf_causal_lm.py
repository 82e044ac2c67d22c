"""A Hugging Face causal LM built from a config (no download), data parallel over torchrun:
ParallelLoader(...).per_device_loader, xm.optimizer_step, xm.save, xm.rendezvous.

    torchrun --nproc_per_node=2 hf_causal_lm.py --steps 30 --output_dir /tmp/out
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.xla_backend  # noqa: F401
from torch.utils.data import DataLoader, TensorDataset
from transformers import AutoModelForCausalLM, GPT2Config, set_seed

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--output_dir", default="output")
args = parser.parse_args()

dist.init_process_group("xla")
device = xm.xla_device()
set_seed(0)

config = GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=4)
model = AutoModelForCausalLM.from_config(config).to(device)
model.train()

# token sequences with structure to learn: each sequence counts up from a random start (mod 256)
gen = torch.Generator().manual_seed(1234 + xm.get_ordinal())
starts = torch.randint(0, 256, (args.steps * 8, 1), generator=gen)
input_ids = (starts + torch.arange(32)) % 256
loader = DataLoader(TensorDataset(input_ids), batch_size=8)
device_loader = pl.ParallelLoader(loader, [device]).per_device_loader(device)

optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
for step, (batch,) in enumerate(device_loader):
    outputs = model(input_ids=batch, labels=batch)
    outputs.loss.backward()
    xm.optimizer_step(optimizer)
    optimizer.zero_grad()
    if step % 5 == 0 or step == args.steps - 1:
        xm.add_step_closure(
            lambda s, loss: xm.master_print(f"step {s} loss {loss.item():.4f}"), args=(step, outputs.loss)
        )

os.makedirs(args.output_dir, exist_ok=True)
xm.save(model.state_dict(), os.path.join(args.output_dir, "model.pt"))
xm.rendezvous("checkpoint saved")
xm.master_print(f"saved {os.path.join(args.output_dir, 'model.pt')}")
