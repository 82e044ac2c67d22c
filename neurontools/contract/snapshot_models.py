"""The daemon snapshot (``GET /v1/snapshot``, docs/snapshot.md), written once.

These frozen dataclasses are the snapshot's one definition: the daemon builds them and writes
them as JSON (emulator/daemon/telemetry.py), the tools validate the JSON back into them
(neurontools/contract/snapshot.py), and the daemon's OpenAPI schema is generated from them. Field
order is the wire's key order; field types say what JSON must hold (neurontools/contract/validation.py).

The snapshot carries its schema version (``schema_version``, :data:`SCHEMA_VERSION`): the daemon
and the tools ship together, so a snapshot of another version is refused with one error
(neurontools/contract/snapshot.py), never read field by field. Required on the wire is what reports
are computed from; ``compile_cache``, ``collectives``, per-engine busy times, ``command``,
``runtime_version``, ``pod`` and ``cpu_error`` may be absent (zero, empty or null), and so may
``jobs`` (none) and ``efa_bandwidth_factor`` (1: no fault). ``tool`` processes carry no counters.
A few wire objects are nested deeper than the tools read them (a subgraph's memory): properties
give the short names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Annotated, Final, Literal, NamedTuple, TypeVar, Union

from pydantic import Discriminator
from pydantic_core import core_schema as cs

from neurontools.contract.inventory import RUNTIME, TOOL, HardwareInfo, InstanceIdentity, PodRef, first_by_pid
from neurontools.contract.schema import CORE_MEMORY_KEYS, HOST_MEMORY_KEYS, VCPU_FIELDS
from neurontools.contract.validation import (
    FixedArray,
    Flag,
    IndexKeyed,
    Integer,
    JsonType,
    Number,
    Reusable,
    StrictFields,
    Text,
    index_key,
)

T = TypeVar("T")

SCHEMA_VERSION: Final = 1  # of the snapshot below; a change a reader must know of takes the next one
# what a reader says of a snapshot of another version (or none): daemon and tools ship together
SCHEMA_VERSION_EXPECTED = (
    f"schema version {SCHEMA_VERSION} (daemon and tools ship together: use the tools of the daemon's release)"
)
SchemaVersion = Annotated[
    int,
    JsonType(SCHEMA_VERSION_EXPECTED, lambda: cs.literal_schema([SCHEMA_VERSION]), {"const": SCHEMA_VERSION}),
]

CoreIndex = Annotated[int, index_key("a NeuronCore index")]  # keys "0", "1", ... of per-core objects
ByCore = Annotated[dict[CoreIndex, T], IndexKeyed()]  # global core id -> T, in core order


class Latency(NamedTuple):
    """One finished execution: daemon-monotonic end time, total and device latency in seconds."""

    end: float
    total: float
    device: float


_latency = partial(tuple.__new__, Latency)  # Latency from 3 validated items, without a Python-level call


def _logged(items: tuple[int, float, float, float]) -> tuple[int, Latency]:
    return items[0], _latency(items[1:])


def _flat(entry: tuple[int, Latency]) -> tuple[int, float, float, float]:
    return (entry[0], *entry[1])


# on the wire [end, total, device]
LatencyArray = Annotated[Latency, FixedArray("[end, total, device]", (Number,) * 3, _latency)]
# on the wire [sequence, end, total, device]; in Python (sequence, Latency)
LoggedLatency = Annotated[
    tuple[int, Latency],
    FixedArray("[sequence, end, total, device]", (Integer, Number, Number, Number), _logged, _flat),
]


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative CPU seconds of a process."""

    user: Number
    system: Number


@dataclass(frozen=True)
class CoreCounters:
    """Cumulative counters of one NeuronCore for one process."""

    busy: Number  # simulated device-busy seconds
    flops: Integer
    engines: dict[Text, Number] = field(default_factory=dict)  # busy seconds per engine


@dataclass(frozen=True)
class ExecutionCounts:
    completed: Integer
    completed_with_err: Integer
    completed_with_num_err: Integer
    timed_out: Integer
    incorrect_input: Integer
    failed_to_queue: Integer


@dataclass(frozen=True)
class ErrorCounts:
    generic: Integer
    numerical: Integer
    transient: Integer
    model: Integer
    runtime: Integer
    hardware: Integer


@dataclass(frozen=True)
class CompileCache:
    hits: Integer = 0
    misses: Integer = 0


@dataclass(frozen=True)
class CollectiveCounters:
    bytes: Integer = 0
    operations: Integer = 0
    seconds: Number = 0.0  # simulated time of the collectives


@dataclass(frozen=True)
class Collectives:
    neuronlink: CollectiveCounters = CollectiveCounters()
    efa: CollectiveCounters = CollectiveCounters()


@dataclass(frozen=True)
class HostMemoryUsage:
    application_memory: Integer
    constants: Integer
    dma_buffers: Integer
    tensors: Integer

    @property
    def total(self) -> int:
        return sum(getattr(self, k) for k in HOST_MEMORY_KEYS)


@dataclass(frozen=True)
class CoreMemoryUsage:
    constants: Integer
    model_code: Integer
    model_shared_scratchpad: Integer
    runtime_memory: Integer
    tensors: Integer

    @property
    def total(self) -> int:
        return sum(getattr(self, k) for k in CORE_MEMORY_KEYS)


@dataclass(frozen=True)
class ProcessMemory:
    host: HostMemoryUsage
    cores: ByCore[CoreMemoryUsage]  # global core id -> usage


@dataclass(frozen=True)
class SubgraphDeviceMemory:
    constants: Integer
    model_code: Integer
    runtime_memory: Integer
    tensors: Integer


@dataclass(frozen=True)
class SubgraphBreakdown:
    host: HostMemoryUsage
    neuron_device: SubgraphDeviceMemory


@dataclass(frozen=True)
class SubgraphMemory:
    host: Integer
    neuron_device: Integer
    usage_breakdown: SubgraphBreakdown


@dataclass(frozen=True)
class Subgraph:
    memory_used_bytes: SubgraphMemory
    neuroncore_index: Integer  # local index within the device
    neuron_device_index: Integer

    @property
    def host(self) -> int:
        return self.memory_used_bytes.host

    @property
    def neuron_device(self) -> int:
        return self.memory_used_bytes.neuron_device

    @property
    def host_breakdown(self) -> HostMemoryUsage:
        return self.memory_used_bytes.usage_breakdown.host

    @property
    def device_breakdown(self) -> SubgraphDeviceMemory:
        return self.memory_used_bytes.usage_breakdown.neuron_device


@dataclass(frozen=True)
class LoadedModel:
    name: Text
    uuid: Text
    model_id: Integer
    is_running: Flag
    subgraphs: dict[Text, Subgraph]


NO_EXECUTIONS = ExecutionCounts(0, 0, 0, 0, 0, 0)
NO_ERRORS = ErrorCounts(0, 0, 0, 0, 0, 0)
NO_HOST_MEMORY = HostMemoryUsage(0, 0, 0, 0)


@dataclass(frozen=True, kw_only=True)
class ProcessSnapshot:
    """One entry of ``processes``: a ``RuntimeProcess`` or a ``ToolProcess`` (which has no counters)."""

    pid: Integer
    tag: Text
    command: Text = ""
    runtime_version: Text = ""
    kind: Text
    neuroncores: tuple[Integer, ...] = ()
    # the Kubernetes container the process runs in (docs/kubernetes.md); null or absent: none
    pod: Annotated[PodRef, StrictFields()] | None = None
    cpu: CpuTimes | None = None  # None: not readable (``cpu_error`` says why)
    cpu_error: Text = ""
    cores: ByCore[CoreCounters] = field(default_factory=dict)
    executions: ExecutionCounts = NO_EXECUTIONS
    errors: ErrorCounts = NO_ERRORS
    latencies: tuple[LatencyArray, ...] = ()
    compile_cache: CompileCache = CompileCache()
    collectives: Collectives = Collectives()
    memory: ProcessMemory = field(default_factory=lambda: ProcessMemory(NO_HOST_MEMORY, {}))
    loaded_models: tuple[LoadedModel, ...] = ()

    @property
    def is_runtime(self) -> bool:
        return self.kind == RUNTIME


@dataclass(frozen=True, kw_only=True)
class RuntimeProcess(ProcessSnapshot):
    """A Neuron runtime process and its cumulative counters. Its memory and loaded models change
    rarely, its counters every second: a ``SnapshotParser`` validates them only when they changed."""

    # field(): required (without it, a field would take over the base class's default)
    kind: Literal["runtime"] = RUNTIME
    cpu: CpuTimes | None = field()
    cores: ByCore[CoreCounters] = field()
    executions: ExecutionCounts = field()
    errors: ErrorCounts = field()
    latencies: tuple[LatencyArray, ...] = field()
    memory: Annotated[ProcessMemory, Reusable("pid")] = field()
    loaded_models: Annotated[tuple[LoadedModel, ...], Reusable("pid")] = field()


@dataclass(frozen=True, kw_only=True)
class ToolProcess(ProcessSnapshot):
    """A tool that only opened the devices (neuron-top, neuron-monitor): no counters."""

    kind: Literal["tool"] = TOOL


AnyProcess = Annotated[Union[RuntimeProcess, ToolProcess], Discriminator("kind")]  # noqa: UP007 (pydantic reads it)


@dataclass(frozen=True)
class VcpuTimes:
    """Cumulative seconds of one real CPU by state."""

    user: Number
    nice: Number
    system: Number
    idle: Number
    io_wait: Number
    irq: Number
    soft_irq: Number

    @property
    def total(self) -> float:
        return sum(getattr(self, k) for k in VCPU_FIELDS)


@dataclass(frozen=True)
class HostMemory:
    total: Integer
    used: Integer
    swap_total: Integer
    swap_used: Integer


@dataclass(frozen=True)
class HostSnapshot:
    vcpus: tuple[VcpuTimes, ...]
    context_switches: Integer
    memory: HostMemory


@dataclass(frozen=True)
class DeviceCounters:
    """Cumulative ECC event counts of one Neuron device."""

    neuron_device_index: Integer
    mem_ecc_corrected: Integer
    mem_ecc_uncorrected: Integer
    sram_ecc_corrected: Integer
    sram_ecc_uncorrected: Integer


@dataclass(frozen=True)
class JobCounters:
    """A training job's steps on this node, as its launcher reported them (docs/multinode.md)."""

    job_id: Text
    steps: Integer  # steps the node's ranks completed
    step_seconds: Number  # their own time for those steps (start to the last of them done)
    wait_seconds: Number  # time the node then waited for slower nodes (step_seconds + this = job's)
    samples: Integer  # sequences the whole job trained in those steps


@dataclass(frozen=True)
class Snapshot:
    # first on the wire; the daemon writes the default (its own version), the tools accept only it
    schema_version: SchemaVersion = field(default=SCHEMA_VERSION, kw_only=True)
    time: Number  # daemon wall clock
    monotonic: Number  # daemon monotonic clock: periods are computed from this one
    instance: Annotated[InstanceIdentity, StrictFields()]
    hardware: Annotated[HardwareInfo, StrictFields()]
    processes: tuple[AnyProcess, ...]
    host: HostSnapshot
    hardware_counters: tuple[DeviceCounters, ...]
    # counters of exited processes (pid 0) and every recent execution as (sequence, latency)
    retired: RuntimeProcess
    latency_log: tuple[LoggedLatency, ...]
    # training jobs on the node and the node's EFA bandwidth factor (docs/faults.md)
    jobs: tuple[JobCounters, ...] = ()
    efa_bandwidth_factor: Number = 1.0

    def process(self, pid: int) -> ProcessSnapshot | None:
        return self._by_pid.get(pid)

    @cached_property
    def _by_pid(self) -> dict[int, ProcessSnapshot]:
        """Each PID's first process (made once, on first use: consumers look up every process)."""
        return first_by_pid(self.processes)

    @property
    def runtime_processes(self) -> tuple[ProcessSnapshot, ...]:
        return tuple(p for p in self.processes if p.is_runtime)
