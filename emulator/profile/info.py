"""``trace_info.json`` of a capture: the one builder every emulated process uses (docs/profiling.md).

Who wrote the capture (instance, pid, host, command line), the ranks of its NeuronCores, the clock
(``time.monotonic()`` and ``time.time()`` read together, so readers can put every process of a host
on one epoch timeline), and the two peaks the summary's MFU and MBU divide by — from the hardware
catalog of the instance type (docs/hardware-catalog.md), not from the reader.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from emulator.hardware import get_instance_type
from emulator.hardware.neuroncore_v2 import NeuronCoreV2Spec
from neurontools.contract.profile import TraceInfo

PEAK_DTYPE = "bfloat16"  # MFU's peak: TensorE at BF16, the dtype Trn1 training runs (docs/profiling.md)


def _command() -> str:
    try:
        raw = Path("/proc/self/cmdline").read_bytes()
    except OSError:
        return " ".join(sys.argv)
    return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)


def _core_spec(instance_type: str) -> NeuronCoreV2Spec | None:
    try:
        return get_instance_type(instance_type).chip.core
    except (KeyError, ValueError):
        return None  # an unknown type: its peaks are not known (written as 0: no MFU/MBU)


def trace_info(instance_id: str, instance_type: str, ranks: Mapping[int, int], world_size: int = 1) -> TraceInfo:
    """The capture's trace info for this process; ``ranks``: NeuronCore -> global rank."""
    core = _core_spec(instance_type)
    monotonic, epoch = time.monotonic(), time.time()
    return TraceInfo(
        instance_id=instance_id,
        instance_type=instance_type,
        pid=os.getpid(),
        hostname=socket.gethostname(),
        clock_monotonic=monotonic,
        clock_epoch=epoch,
        device_profile="off",  # each capture writes its own settings here (writer.ProcessProfile)
        system_profile=False,
        ranks={str(c): r for c, r in ranks.items()},
        world_size=world_size,
        command=_command(),
        peak_flops=core.tensor.peak(PEAK_DTYPE).base if core is not None else 0.0,
        hbm_bandwidth=core.hbm_bandwidth.base if core is not None else 0.0,
    )
