"""Data-parallel MLP regression with torch_xla's FSDP (or plain AdamW with averaged gradients,
``--fsdp 0``): the two must train the same; FSDP keeps 1/N of the parameters and optimizer state
per rank, and its sharded checkpoints consolidate into the full model.

torchrun --nproc_per_node=2 xla_fsdp_mlp.py --fsdp 1 --steps 4 --ckpt DIR
"""

import argparse
import functools
import os

import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_backend  # noqa: F401  (registers the 'xla' process group)
import torch_xla.runtime as xr
from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as FSDP
from torch_xla.distributed.fsdp import consolidate_sharded_model_checkpoints
from torch_xla.distributed.fsdp.wrap import size_based_auto_wrap_policy

parser = argparse.ArgumentParser()
parser.add_argument("--fsdp", type=int, default=1)
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--ckpt", default="")
args = parser.parse_args()

dist.init_process_group("xla")
device = xm.xla_device()
rank, world = xr.global_ordinal(), xr.world_size()
torch.manual_seed(0)  # the same initial model on every rank
model = torch.nn.Sequential(
    torch.nn.Linear(16, 33), torch.nn.Tanh(), torch.nn.Linear(33, 33), torch.nn.Tanh(), torch.nn.Linear(33, 1)
).to(device)
if args.fsdp:  # the larger layers wrapped on their own, the rest by the root
    model = FSDP(model, auto_wrap_policy=functools.partial(size_based_auto_wrap_policy, min_num_params=500))
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)

gen = torch.Generator().manual_seed(1)
inputs, targets = torch.randn(world * 8, 16, generator=gen), torch.randn(world * 8, 1, generator=gen)
x, y = inputs[rank * 8 : (rank + 1) * 8].to(device), targets[rank * 8 : (rank + 1) * 8].to(device)
for step in range(args.steps):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    if args.fsdp:
        model.clip_grad_norm_(1.0)
    else:  # plain data parallelism: average the gradients, clip as FSDP does
        xm.reduce_gradients(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    xm.mark_step()
    mean = xm.all_reduce(xm.REDUCE_SUM, loss.detach()) / world
    xm.master_print(f"step {step} loss {mean.item():.6f}")

state = sum(t.numel() for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t) and t.dim() > 0)
params = sum(p.numel() for p in model.parameters())
print(f"rank {rank} parameters {params} optimizer-state elements {state}", flush=True)
if args.fsdp and args.ckpt:
    os.makedirs(args.ckpt, exist_ok=True)
    xm.save(
        {"model": model.state_dict(), "shard_metadata": model.get_shard_metadata()},
        os.path.join(args.ckpt, f"rank-{rank}-of-{world}.pth"),
        master_only=False,
    )
    xm.rendezvous("saved")
    if rank == 0:
        full, path = consolidate_sharded_model_checkpoints(os.path.join(args.ckpt, ""), "rank-*-of-*.pth")
        checksum = sum(float(t.double().sum()) for t in full.values())
        print(f"consolidated {sorted(full)} checksum {checksum:.6f} at {os.path.basename(path)}", flush=True)
else:
    checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
    xm.master_print(f"plain checksum {checksum:.6f}")
