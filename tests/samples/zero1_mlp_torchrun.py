"""Data-parallel MLP regression with torch_xla's ZeRO-1 optimizer (or plain AdamW with averaged
gradients, ``--zero1 0``): the two must train the same.

torchrun --nproc_per_node=2 zero1_mlp_torchrun.py --zero1 1 --steps 5
"""

import argparse

import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_backend  # noqa: F401  (registers the 'xla' process group)
import torch_xla.runtime as xr
from torch_xla.distributed.zero_redundancy_optimizer import ZeroRedundancyOptimizer

parser = argparse.ArgumentParser()
parser.add_argument("--zero1", type=int, default=1)
parser.add_argument("--steps", type=int, default=5)
args = parser.parse_args()

dist.init_process_group("xla")
device = xm.xla_device()
rank, world = xr.global_ordinal(), xr.world_size()
torch.manual_seed(0)  # the same initial model on every rank
model = torch.nn.Sequential(torch.nn.Linear(16, 33), torch.nn.Tanh(), torch.nn.Linear(33, 1)).to(device)
if args.zero1:
    optimizer = ZeroRedundancyOptimizer(model.parameters(), torch.optim.AdamW, lr=0.01, max_norm=1.0)
else:
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)

gen = torch.Generator().manual_seed(1)
inputs, targets = torch.randn(world * 8, 16, generator=gen), torch.randn(world * 8, 1, generator=gen)
x, y = inputs[rank * 8 : (rank + 1) * 8].to(device), targets[rank * 8 : (rank + 1) * 8].to(device)
for step in range(args.steps):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    if not args.zero1:  # plain data parallelism: average the gradients, clip as ZeRO-1 does
        xm.reduce_gradients(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    xm.mark_step()
    total = xm.all_reduce(xm.REDUCE_SUM, loss.detach()) / world
    xm.master_print(f"step {step} loss {total.item():.6f}")

weights = sum(p.detach().double().sum().item() for p in model.parameters())
state = optimizer.base_optimizer.state if args.zero1 else optimizer.state
held = sum(t.numel() for s in state.values() for t in s.values() if torch.is_tensor(t) and t.dim() > 0)
print(f"rank {rank} weights {weights:.6f} optimizer-state elements {held}")
