"""An execution the daemon counted, as a line of its core's device profile (docs/profiling.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from neurontools.contract.profile import ExecutedCollective, ProfiledExecution

# The fields read of ``emulator.runtime.execution.Execution``, as protocols: the runtime imports
# this package, so this package does not import the runtime (lint-imports: no cycles).


class _Collective(Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def bytes(self) -> int: ...
    @property
    def ranks(self) -> int: ...
    @property
    def nodes(self) -> int: ...
    @property
    def count(self) -> int: ...
    @property
    def seconds(self) -> float: ...
    @property
    def link_bytes(self) -> Mapping[Any, int] | None: ...


class _CoreMemory(Protocol):
    @property
    def constants(self) -> int: ...
    @property
    def model_code(self) -> int: ...
    @property
    def model_shared_scratchpad(self) -> int: ...
    @property
    def runtime_memory(self) -> int: ...
    @property
    def tensors(self) -> int: ...


class _Memory(Protocol):
    @property
    def core(self) -> _CoreMemory | None: ...


class Execution(Protocol):
    """An execution as posted to the daemon (``emulator.runtime.execution.Execution``)."""

    @property
    def start(self) -> float: ...
    @property
    def device_seconds(self) -> float: ...
    @property
    def total_latency(self) -> float: ...
    @property
    def outcome(self) -> str: ...
    @property
    def flops(self) -> int: ...
    @property
    def engines(self) -> Mapping[Any, float]: ...
    @property
    def collectives(self) -> Sequence[_Collective]: ...
    @property
    def memory(self) -> _Memory: ...


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
