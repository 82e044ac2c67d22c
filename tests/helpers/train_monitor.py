"""A training script's first lines on a Neuron host, for the tests: attach, report, hold.

Prints ``attached {"neuroncores": [...]}`` once ``xla_device()`` returned, then holds the cores
until its stdin is closed (or it is killed). A refused attach exits 1 with the runtime error.
"""

import json
import sys

import emulator.xla as xm

try:
    device = xm.xla_device()
except xm.NeuronRuntimeError as exc:
    print(f"train_monitor: {exc}", file=sys.stderr)
    sys.exit(1)
print("attached " + json.dumps({"neuroncores": list(xm.neuroncores()), "device": str(device)}), flush=True)
sys.stdin.read()
