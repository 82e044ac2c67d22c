"""One execution of a step graph on a NeuronCore: what a process reports to the daemon.

Every execution — a real-math process's (``emulator.runtime.executor``), a replaying rank's
(``emulator.parallel.replay``), one a hardware error or a lost peer ends — is an
:class:`Execution` built by :func:`execution`, the one place a core's faults apply
(docs/faults.md): a slow core stretches the whole execution, a cut EFA bandwidth its inter-node
collectives, ``nan`` marks it a numerical error, an armed uncorrectable ECC error fails it.

The types are standard-library frozen dataclasses (a replaying rank imports neither pydantic nor
torch). They are also the daemon's wire model: FastAPI validates a posted execution into an
:class:`Execution` through the bounds annotated here (``annotated_types``, which pydantic reads),
and the daemon's telemetry counts those objects (docs/snapshot.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Annotated, Any, Literal, cast

from annotated_types import Ge, Le, MaxLen

from emulator.runtime.faults import NO_FAULTS, CoreFaults
from neurontools.contract.schema import ENGINE_KEYS

# Bounds of the numbers a process reports (docs/fuzzing.md): counters fit the runtime's 64-bit
# integers, so every consumer can turn a sum of them into a float; durations are finite and at
# most a day per execution, so the busy-time sums stay finite and JSON can carry them.
MAX_COUNT = 2**63 - 1
MAX_SECONDS = 86_400.0
Count = Annotated[int, Ge(0), Le(MAX_COUNT)]
Seconds = Annotated[float, Ge(0), Le(MAX_SECONDS)]
Multiplicity = Annotated[int, Ge(1), Le(1_000_000)]
Engine = Literal["tensor", "vector", "scalar", "gpsimd", "dma"]
Link = Literal["intra_chip", "neuronlink", "efa"]
Outcome = Literal[
    "completed", "completed_with_err", "completed_with_num_err", "timed_out", "incorrect_input", "failed_to_queue"
]
# pydantic's settings for these dataclasses when the daemon validates them: no NaN or Infinity
WIRE_CONFIG = {"allow_inf_nan": False}


@dataclass(frozen=True)
class ModelRef:
    """The loaded model (NEFF) an execution runs."""

    __pydantic_config__ = WIRE_CONFIG
    model_id: Count
    uuid: Annotated[str, MaxLen(128)]
    name: Annotated[str, MaxLen(4096)]
    code_bytes: Count


@dataclass(frozen=True)
class CompileCacheCounts:
    """The process's compile-cache counts so far (both required: the daemon keeps the latest)."""

    __pydantic_config__ = WIRE_CONFIG
    hits: Count
    misses: Count


@dataclass
class CompileCacheCounter:
    """The one count of a process's compile-cache hits and misses, and what it reports: the counts
    since the daemon last registered it (a restarted daemon's counters start from zero)."""

    hits: int = 0
    misses: int = 0
    _base: tuple[int, int] = (0, 0)

    def count(self, *, hit: bool) -> None:
        if hit:
            self.hits += 1
        else:
            self.misses += 1

    def registered(self) -> None:
        """A (restarted) daemon registered the process: report from zero again."""
        self._base = (self.hits, self.misses)

    def reported(self) -> CompileCacheCounts:
        return CompileCacheCounts(hits=self.hits - self._base[0], misses=self.misses - self._base[1])


@dataclass(frozen=True)
class CoreMemory:
    """The device memory a process holds on the core, bytes by category (docs/snapshot.md)."""

    __pydantic_config__ = WIRE_CONFIG
    constants: Count
    model_code: Count
    model_shared_scratchpad: Count
    runtime_memory: Count
    tensors: Count


@dataclass(frozen=True)
class MemoryReport:
    """The core's device memory when the execution starts, and the ledger's high-water mark."""

    __pydantic_config__ = WIRE_CONFIG
    core: CoreMemory | None = None
    peak: Count = 0


@dataclass(frozen=True)
class Collective:
    """Collectives an execution does: ``count`` identical ones, ``seconds`` the modelled time of one
    (inside the execution's device time). ``link_bytes``: bytes this core sent over each link type
    (its ring on the topology); without it the payload counts on NeuronLink, or on EFA when the
    collective spans nodes."""

    __pydantic_config__ = WIRE_CONFIG
    kind: Annotated[str, MaxLen(64)]
    bytes: Count
    ranks: Multiplicity
    nodes: Multiplicity = 1
    count: Multiplicity = 1
    seconds: Seconds = 0.0
    link_bytes: dict[Link, Count] | None = None

    @property
    def time_link(self) -> str:
        """The link type its time counts on: EFA when it spans nodes (its inter-node hop bounds
        it), else NeuronLink (on the instance, the same chip included)."""
        return "efa" if self.nodes > 1 else "neuronlink"

    def counted_bytes(self) -> dict[str, int]:
        """Bytes of one on each counted link type: NeuronLink and EFA (traffic between the two
        cores of one chip crosses neither)."""
        if self.link_bytes:
            return {link: n for link, n in self.link_bytes.items() if link in ("neuronlink", "efa") and n > 0}
        return {self.time_link: self.bytes}


@dataclass(frozen=True)
class Execution:
    """One step graph starting on a NeuronCore: its simulated cost and outcome. ``start``: the
    host's ``time.monotonic()`` when the device starts it; ``device_seconds`` its device latency,
    collectives included; ``compute_seconds`` the time the core is busy with it (utilization;
    the NEFF holds the core all along, so both are equal); ``total_latency`` the runtime's,
    queueing and host time included. ``error``: the error_summary counter of a failed execution
    when its outcome does not say it (``hardware`` for an uncorrectable ECC error)."""

    __pydantic_config__ = WIRE_CONFIG
    core: Count
    start: Annotated[float, Ge(0), Le(1e12)]
    device_seconds: Seconds
    compute_seconds: Seconds
    total_latency: Seconds
    flops: Count
    engines: dict[Engine, Seconds]
    outcome: Outcome
    compile_cache: CompileCacheCounts
    error: Literal["hardware"] | None = None
    model: ModelRef | None = None
    collectives: Annotated[tuple[Collective, ...], MaxLen(100_000)] = ()
    memory: MemoryReport = field(default_factory=MemoryReport)

    def __post_init__(self) -> None:
        if self.error is not None and self.outcome != "completed_with_err":
            raise ValueError(f"error {self.error!r} needs outcome 'completed_with_err'")
        if self.compute_seconds > self.device_seconds:
            raise ValueError("compute_seconds must not exceed device_seconds")

    def to_wire(self) -> dict[str, Any]:
        """The JSON object the daemon validates back into this execution."""
        return asdict(self)


@dataclass(frozen=True)
class Work:
    """What the cost model says an execution does on a healthy core: its device time (its
    collectives' included), FLOPs, engine busy time, collectives, and the host time before the
    device starts it (compile, queueing)."""

    device_seconds: float = 0.0
    flops: int = 0
    engines: Mapping[str, float] = field(default_factory=dict)
    collectives: tuple[Collective, ...] = ()
    host_seconds: float = 0.0


@dataclass(frozen=True)
class Holding:
    """What the process holds when the execution starts: the model it runs, its compile-cache
    counts, the core's device memory."""

    model: ModelRef | None
    compile_cache: CompileCacheCounts
    memory: MemoryReport


def _never() -> bool:
    return False


def execution(
    core: int,
    start: float,
    work: Work,
    holding: Holding,
    faults: CoreFaults = NO_FAULTS,
    *,
    timeout: float = math.inf,
    numerical_error: Callable[[], bool] = _never,
    peer_lost: bool = False,
) -> Execution:
    """The execution of ``work`` on ``core`` with the core's ``faults`` (docs/faults.md):

    - an armed uncorrectable ECC error fails it at once (no device time, outcome
      ``completed_with_err``, error ``hardware``); a lost peer (``peer_lost``) leaves it blocked in
      its first collective until the runtime's timeout (no device time, outcome ``timed_out``);
    - every collective spanning nodes takes 1/``efa_bandwidth_factor`` as long;
    - a slow core takes ``slow_factor`` x as long for all of it, collectives and engines included;
    - over ``timeout`` it times out; else ``nan`` or ``numerical_error()`` (NaN/Inf in the real
      values) make it ``completed_with_num_err``.
    """
    if faults.hardware_error is not None or peer_lost:
        return _ended(core, start, work.host_seconds, holding, hardware=faults.hardware_error is not None)
    efa = 1.0 / faults.efa_bandwidth_factor  # a collective spanning nodes is bound by its EFA hop
    over_efa = [_scaled(c, efa if c.nodes > 1 else 1.0) for c in work.collectives]
    efa_extra = sum((s.seconds - c.seconds) * c.count for s, c in zip(over_efa, work.collectives, strict=True))
    device_seconds = (work.device_seconds + efa_extra) * faults.slow_factor
    collectives = tuple(_scaled(c, faults.slow_factor) for c in over_efa)
    if device_seconds > timeout:
        outcome: Outcome = "timed_out"
    elif faults.nan or numerical_error():
        outcome = "completed_with_num_err"
    else:
        outcome = "completed"
    return Execution(
        core=core,
        start=start,
        device_seconds=device_seconds,
        compute_seconds=device_seconds,  # the NEFF occupies the core all along, collectives included
        total_latency=work.host_seconds + min(device_seconds, timeout),
        flops=int(work.flops),
        engines={cast(Engine, e): float(work.engines.get(e, 0.0)) * faults.slow_factor for e in ENGINE_KEYS},
        outcome=outcome,
        model=holding.model,
        compile_cache=holding.compile_cache,
        collectives=collectives,
        memory=holding.memory,
    )


def _ended(core: int, start: float, host_seconds: float, holding: Holding, *, hardware: bool) -> Execution:
    """An execution that ends at once with no device time: failed by a hardware error, or
    blocked in its first collective by a lost peer until the runtime's timeout."""
    return Execution(
        core=core,
        start=start,
        device_seconds=0.0,
        compute_seconds=0.0,
        total_latency=host_seconds,
        flops=0,
        engines={},
        outcome="completed_with_err" if hardware else "timed_out",
        error="hardware" if hardware else None,
        model=holding.model,
        compile_cache=holding.compile_cache,
        memory=holding.memory,
    )


def _scaled(collective: Collective, factor: float) -> Collective:
    return collective if factor == 1.0 else replace(collective, seconds=collective.seconds * factor)
