"""Attach, put N GiB of (meta) tensors on the device, hold them until stdin closes.

    python hold_hbm.py 14.5      # prints "holding <bytes>" once the bytes are on the device
"""

import sys

import torch

import emulator.xla as xm

gib = float(sys.argv[1])
device = xm.model_scale_device()  # meta tensors: counted, never allocated
n = int(gib * 2**30) // 4
held = torch.empty(n, dtype=torch.float32, device="meta").to(device)
xm.mark_step()  # one execution, so the daemon learns the memory in use
print(f"holding {held.numel() * 4}", flush=True)
sys.stdin.read()
