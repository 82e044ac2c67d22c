"""One rank of a two-node data-parallel job (run under ``neuron-emulator exec``, one per node:
``RANK``, ``WORLD_SIZE=2``, ``LOCAL_WORLD_SIZE=1``, ``MASTER_ADDR``/``MASTER_PORT`` set by the
test): a step without collectives, then ``--steps`` steps that each all-reduce a 1 MiB tensor
across the two nodes (over EFA: docs/faults.md)."""

import argparse

import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_backend  # noqa: F401  (registers the 'xla' process group)

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args()

dist.init_process_group("xla")
device = xm.xla_device()
t = torch.ones(1 << 18, device=device) * 2
xm.mark_step()  # no collective: its answer brings the node's faults to the process
for _ in range(args.steps):
    dist.all_reduce(t)
    t = t / 2  # the mean of the two ranks: 2 everywhere
    xm.mark_step()
print(f"rank {dist.get_rank()} sum {t.sum().item():.0f}", flush=True)
dist.destroy_process_group()
