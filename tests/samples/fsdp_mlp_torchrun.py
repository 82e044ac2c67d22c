"""Data-parallel MLP regression with torch_xla's FSDP (or plain AdamW with averaged gradients,
``--fsdp 0``): the two must train the same.

torchrun --nproc_per_node=2 fsdp_mlp_torchrun.py --fsdp 1 --steps 5 [--flatten 1] [--ckpt DIR]

With ``--fsdp 1`` each block is an FSDP module of its own (transformer_auto_wrap_policy), the
head stays with the root; with ``--ckpt DIR`` every rank saves its shard, and rank 0 consolidates
them into DIR/consolidated.pth. ``--fsdp 0 --ckpt DIR`` saves the plain model as DIR/plain.pth.
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
from torch_xla.distributed.fsdp import checkpoint_module, consolidate_sharded_model_checkpoints
from torch_xla.distributed.fsdp.wrap import transformer_auto_wrap_policy

parser = argparse.ArgumentParser()
parser.add_argument("--fsdp", type=int, default=1)
parser.add_argument("--flatten", type=int, default=0)
parser.add_argument("--steps", type=int, default=5)
parser.add_argument("--ckpt", default="")
args = parser.parse_args()


class Block(torch.nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(d_in, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x))


def build() -> torch.nn.Module:
    torch.manual_seed(0)  # the same initial model on every rank
    return torch.nn.Sequential(Block(16, 33), Block(33, 33), torch.nn.Linear(33, 1))


dist.init_process_group("xla")
device = xm.xla_device()
rank, world = xr.global_ordinal(), xr.world_size()
model = build()
if args.fsdp:
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
    # the blocks' activations are recomputed in backward, as the GPT-2 sample's layers are
    wrapper = lambda m, *a, **kw: FSDP(checkpoint_module(m), *a, **kw)  # noqa: E731
    model = FSDP(
        model,
        auto_wrap_policy=policy,
        auto_wrapper_callable=wrapper,
        flatten_parameters=bool(args.flatten),
        shard_param_on_dim_0=not args.flatten,
    )
else:
    model = model.to(device)
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
    total = xm.all_reduce(xm.REDUCE_SUM, loss.detach()) / world
    xm.master_print(f"step {step} loss {total.item():.6f}")

# FSDP: this rank's shards (their padding stays zero), plain: the whole model
weights = sum(p.detach().double().sum().item() for p in model.parameters())
held = sum(t.numel() for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t) and t.dim() > 0)
print(f"rank {rank} weights {weights:.6f} optimizer-state elements {held}")

if args.ckpt and args.fsdp:
    ckpt = {
        "model": model.state_dict(),
        "shard_metadata": model.get_shard_metadata(),
        "optimizer": optimizer.state_dict(),
    }
    xm.save(ckpt, os.path.join(args.ckpt, f"rank-{rank}-of-{world}.pth"), master_only=False)
    xm.rendezvous("checkpoint saved")
    if rank == 0:
        prefix, target = os.path.join(args.ckpt, "rank-"), os.path.join(args.ckpt, "consolidated.pth")
        full, _ = consolidate_sharded_model_checkpoints(prefix, "*-of-*.pth", save_path=target)
        expected = build().state_dict()
        same = sorted(full) == sorted(expected) and all(full[k].shape == v.shape for k, v in expected.items())
        print(f"consolidated {len(full)} tensors, names and shapes as the unwrapped model's: {same}")
elif args.ckpt and rank == 0:
    xm.save(model.state_dict(), os.path.join(args.ckpt, "plain.pth"))
