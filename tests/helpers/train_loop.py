"""A torch_xla-style training loop for the tests, ported with one import.

    python train_loop.py --steps 20 --width 64 --lr 0.01 [--batch 32] [--meta] [--hold]

Prints one JSON line per step: loss (real math), and what ``xm.last_step()`` reports.
``--shapes`` alternates two batch sizes (forces a second graph); ``--hold`` waits for stdin to
close after training, holding the cores and memory.
"""

import argparse
import json
import sys

import torch

import emulator.xla as xm

STEP_FIELDS = ("device_seconds", "flops", "compiled", "cache_hit", "outcome", "ops")  # of xm.last_step()

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--width", type=int, default=64)
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--meta", action="store_true")
parser.add_argument("--shapes", action="store_true")
parser.add_argument("--hold", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
try:
    # meta tensors (shapes, no values) go to the Python device layer, which never allocates them
    device = xm.model_scale_device() if args.meta else xm.xla_device()
    maker = torch.device("meta") if args.meta else torch.device("cpu")
    with maker:
        model = torch.nn.Sequential(
            torch.nn.Linear(args.width, args.width * 4), torch.nn.GELU(), torch.nn.Linear(args.width * 4, 1)
        )
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    gen = torch.Generator().manual_seed(1)
    teacher = torch.randn(args.width, 1, generator=gen)
    for step in range(args.steps):
        batch = args.batch if not (args.shapes and step % 2) else args.batch * 2
        x = torch.randn(batch, args.width, generator=gen)
        y = x @ teacher
        if args.meta:
            x, y = x.to("meta"), y.to("meta")
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        xm.optimizer_step(opt)
        result = xm.last_step()
        out = {"step": step, "loss": None if args.meta else loss.item()}
        if result is not None:
            out.update({key: getattr(result, key) for key in STEP_FIELDS})
        print(json.dumps(out), flush=True)
except xm.NeuronRuntimeError as exc:
    print(f"train_loop: {exc}", file=sys.stderr)
    sys.exit(1)
print(json.dumps({"done": True, "params": sum(p.numel() for p in model.parameters())}), flush=True)
if args.hold:
    sys.stdin.read()
