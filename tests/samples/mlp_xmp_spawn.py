"""Data-parallel MLP regression with xmp.spawn and torch_xla.runtime (one process per NeuronCore).

python mlp_xmp_spawn.py --steps 40
"""

import argparse

import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr


def _mp_fn(index, flags):
    dist.init_process_group("xla", init_method="xla://")
    device = xm.xla_device()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(100 + xr.global_ordinal())
    teacher = torch.randn(16, 1, generator=torch.Generator().manual_seed(7))
    batches = []
    for _ in range(flags.steps):
        x = torch.randn(32, 16, generator=gen)
        batches.append((x, x @ teacher))
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for x, y in pl.MpDeviceLoader(batches, device):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        xm.optimizer_step(optimizer)
        xm.add_step_closure(lambda v: losses.append(v.item()), args=(loss,))
    xm.master_print(
        f"index {index} ordinal {xr.global_ordinal()} local {xr.local_ordinal()} world {xr.world_size()} "
        f"first loss {losses[0]:.4f} last loss {losses[-1]:.4f}"
    )
    xm.rendezvous("end")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    xmp.spawn(_mp_fn, args=(parser.parse_args(),))
