"""One all-reduce of NBYTES bytes among replica groups, then one step: a rank of an exec job.

    RANK=r WORLD_SIZE=n ... python all_reduce_once.py NBYTES GROUPS_JSON

Run by tests/test_collective_cost.py with torchrun's environment (a store the test hosts); the
collective goes the way a script's ``xm.all_reduce`` goes under ``neuron-emulator exec``.
"""

from __future__ import annotations

import json
import sys

import torch

from emulator.compat import xla_model as xm


def main() -> None:
    nbytes, groups = int(sys.argv[1]), json.loads(sys.argv[2])
    device = xm.xla_device()
    t = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    xm.all_reduce(xm.REDUCE_SUM, [t], groups=groups)
    xm.mark_step()
    print(json.dumps({"sum": float(t.cpu()[0])}), flush=True)


if __name__ == "__main__":
    main()
