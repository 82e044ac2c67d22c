"""A minimal Neuron "training script": attach to the emulated instance and hold its NeuronCores.

    NEURON_RT_VISIBLE_CORES=0-3 python examples/hold_cores.py

Ported from torch_xla by changing one import. It claims cores exactly as the Neuron runtime
does (NEURON_RT_VISIBLE_CORES, NEURON_RT_NUM_CORES, torchrun's LOCAL_RANK) and keeps them until
it is stopped (Ctrl-C, SIGTERM, or end of stdin when --until-stdin-closes is given).
"""

from __future__ import annotations

import signal
import sys

import emulator.xla as xm


def main() -> int:
    try:
        device = xm.xla_device()
    except xm.NeuronRuntimeError as exc:
        print(f"hold_cores: {exc}", file=sys.stderr)
        return 1
    cores = xm.neuroncores()
    print(f"attached: device={device} neuroncores=nc{cores[0]}-nc{cores[-1]}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        if "--until-stdin-closes" in sys.argv:
            sys.stdin.read()
        else:
            signal.pause()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
