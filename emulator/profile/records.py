"""An execution the daemon counted, as a line of its core's device profile (docs/profiling.md)."""

from __future__ import annotations

from emulator.runtime.execution import Execution
from neurontools.contract.profile import ExecutedCollective, ProfiledExecution


def profiled_execution(
    ex: Execution, *, step: int, number: int, host_seconds: float, slow_factor: float = 1.0
) -> ProfiledExecution:
    """The device-profile record of ``ex``: the very numbers posted to the daemon (device time,
    FLOPs, engine busy time, collectives with their faults applied), plus the host time before it
    and the slow factor its ops were stretched by (docs/faults.md)."""
    memory = ex.memory.core
    in_use = 0 if memory is None else sum(
        (memory.constants, memory.model_code, memory.model_shared_scratchpad, memory.runtime_memory, memory.tensors)
    )
    return ProfiledExecution(
        step=step,
        number=number,
        start=ex.start,
        device_seconds=ex.device_seconds,
        host_seconds=host_seconds,
        outcome=ex.outcome,
        flops=ex.flops,
        engines={str(e): s for e, s in ex.engines.items()},
        collectives=tuple(
            ExecutedCollective(
                kind=c.kind,
                bytes=c.bytes,
                ranks=c.ranks,
                nodes=c.nodes,
                count=c.count,
                seconds=c.seconds,
                link_bytes={str(k): v for k, v in (c.link_bytes or {}).items()},
            )
            for c in ex.collectives
        ),
        hbm_in_use=in_use,
        slow_factor=slow_factor,
    )
