"""Typed, validated view of the daemon snapshot (``GET /v1/snapshot``, docs/snapshot.md).

The daemon publishes cumulative counters and current gauges; the report builder computes
per-period figures from two snapshots. Parsing is strict about everything a report is computed
from (a wrong type names the key, e.g. ``snapshot.processes[0].cores["1"].busy: expected a number``)
and lenient about what reports do not use: ``compile_cache``, ``collectives``, per-engine busy
times, ``command``, ``runtime_version`` and ``cpu_error`` default to zero/empty when absent, and
unknown keys are ignored so a newer daemon can add fields. ``tool`` processes carry no counters.
Integer fields also accept integral floats (``12.0``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from neurontools.inventory import PROCESS_KINDS, RUNTIME, HardwareInfo, InstanceIdentity
from neurontools.report.schema import (
    CORE_MEMORY_KEYS,
    ERROR_SUMMARY_KEYS,
    EXECUTION_SUMMARY_KEYS,
    HARDWARE_INFO_KEYS,
    HOST_MEMORY_KEYS,
    HW_COUNTER_KEYS,
    INSTANCE_INFO_KEYS,
    SUBGRAPH_DEVICE_MEMORY_KEYS,
    VCPU_FIELDS,
)

if TYPE_CHECKING:
    from neurontools.sources.daemon_client import DaemonClient

SNAPSHOT_PATH = "/snapshot"
T = TypeVar("T")


class SnapshotError(ValueError):
    """The snapshot is malformed; the message names the offending key."""


# -- validation helpers ---------------------------------------------------------------------------

_MISSING = object()


def json_type_name(value: Any) -> str:
    """How a JSON value is named in error messages ('a string', 'an array', 'null' ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _fail(where: str, expected: str, value: Any) -> SnapshotError:
    shown = repr(value) if isinstance(value, int | float | str | bool) else json_type_name(value)
    return SnapshotError(f"{where}: expected {expected}, got {shown}")


def _get(data: Mapping[str, Any], key: str, where: str, default: Any = _MISSING) -> Any:
    if key in data:
        return data[key]
    if default is _MISSING:
        raise SnapshotError(f"{where}: missing key {key!r}")
    return default


def _obj(value: Any, where: str) -> Mapping[str, Any]:
    if type(value) is dict:  # what JSON gives: skip the slower ABC check
        return value
    if not isinstance(value, Mapping):
        raise _fail(where, "an object", value)
    return value


def _arr(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(where, "an array", value)
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _fail(where, "a string", value)
    return value


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise _fail(where, "a boolean", value)
    return value


def _num(value: Any, where: str) -> float:
    kind = type(value)
    if kind is float or kind is int:
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(where, "a number", value)
    return float(value)


def _int(value: Any, where: str) -> int:
    if type(value) is int:
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(where, "an integer", value)
    if isinstance(value, float):
        if not value.is_integer():
            raise _fail(where, "an integer", value)
        return int(value)
    return value


def _ints(data: Mapping[str, Any], keys: tuple[str, ...], where: str) -> dict[str, int]:
    values = {k: data.get(k) for k in keys}
    if all(type(v) is int for v in values.values()):  # the usual case; the checks below name what is wrong
        return values  # type: ignore[return-value]
    return {k: _int(_get(data, k, where), f"{where}.{k}") for k in keys}


def _core_key(key: str, where: str) -> int:
    if not (isinstance(key, str) and key.isdigit() and key.isascii()):
        raise SnapshotError(f"{where}: key {key!r} is not a NeuronCore index")
    return int(key)


# -- dataclasses ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative CPU seconds of a process."""

    user: float
    system: float


@dataclass(frozen=True)
class CoreCounters:
    """Cumulative counters of one NeuronCore for one process."""

    busy: float  # simulated device-busy seconds
    flops: int
    engines: Mapping[str, float] = field(default_factory=dict)  # busy seconds per engine


@dataclass(frozen=True)
class ExecutionCounts:
    completed: int = 0
    completed_with_err: int = 0
    completed_with_num_err: int = 0
    timed_out: int = 0
    incorrect_input: int = 0
    failed_to_queue: int = 0


@dataclass(frozen=True)
class ErrorCounts:
    generic: int = 0
    numerical: int = 0
    transient: int = 0
    model: int = 0
    runtime: int = 0
    hardware: int = 0


@dataclass(frozen=True)
class Latency:
    """One finished execution: daemon-monotonic end time, total and device latency in seconds."""

    end: float
    total: float
    device: float


@dataclass(frozen=True)
class CompileCache:
    hits: int = 0
    misses: int = 0


@dataclass(frozen=True)
class CollectiveCounters:
    bytes: int = 0
    operations: int = 0


@dataclass(frozen=True)
class Collectives:
    neuronlink: CollectiveCounters = CollectiveCounters()
    efa: CollectiveCounters = CollectiveCounters()


@dataclass(frozen=True)
class HostMemoryUsage:
    application_memory: int = 0
    constants: int = 0
    dma_buffers: int = 0
    tensors: int = 0

    @property
    def total(self) -> int:
        return sum(getattr(self, k) for k in HOST_MEMORY_KEYS)


@dataclass(frozen=True)
class CoreMemoryUsage:
    constants: int = 0
    model_code: int = 0
    model_shared_scratchpad: int = 0
    runtime_memory: int = 0
    tensors: int = 0

    @property
    def total(self) -> int:
        return sum(getattr(self, k) for k in CORE_MEMORY_KEYS)


@dataclass(frozen=True)
class ProcessMemory:
    host: HostMemoryUsage = HostMemoryUsage()
    cores: Mapping[int, CoreMemoryUsage] = field(default_factory=dict)  # global core id -> usage


@dataclass(frozen=True)
class SubgraphDeviceMemory:
    constants: int = 0
    model_code: int = 0
    runtime_memory: int = 0
    tensors: int = 0


@dataclass(frozen=True)
class Subgraph:
    host: int
    neuron_device: int
    host_breakdown: HostMemoryUsage
    device_breakdown: SubgraphDeviceMemory
    neuroncore_index: int  # local index within the device
    neuron_device_index: int


@dataclass(frozen=True)
class LoadedModel:
    name: str
    uuid: str
    model_id: int
    is_running: bool
    subgraphs: Mapping[str, Subgraph]


@dataclass(frozen=True)
class ProcessSnapshot:
    pid: int
    tag: str
    kind: str
    command: str = ""
    runtime_version: str = ""
    neuroncores: tuple[int, ...] = ()
    cpu: CpuTimes | None = None
    cpu_error: str = ""
    cores: Mapping[int, CoreCounters] = field(default_factory=dict)
    executions: ExecutionCounts = ExecutionCounts()
    errors: ErrorCounts = ErrorCounts()
    latencies: tuple[Latency, ...] = ()
    compile_cache: CompileCache = CompileCache()
    collectives: Collectives = Collectives()
    memory: ProcessMemory = ProcessMemory()
    loaded_models: tuple[LoadedModel, ...] = ()

    @property
    def is_runtime(self) -> bool:
        return self.kind == RUNTIME


@dataclass(frozen=True)
class VcpuTimes:
    """Cumulative seconds of one real CPU by state."""

    user: float = 0.0
    nice: float = 0.0
    system: float = 0.0
    idle: float = 0.0
    io_wait: float = 0.0
    irq: float = 0.0
    soft_irq: float = 0.0

    @property
    def total(self) -> float:
        return sum(getattr(self, k) for k in VCPU_FIELDS)


@dataclass(frozen=True)
class HostMemory:
    total: int
    used: int
    swap_total: int
    swap_used: int


@dataclass(frozen=True)
class HostSnapshot:
    vcpus: tuple[VcpuTimes, ...]
    context_switches: int
    memory: HostMemory


@dataclass(frozen=True)
class DeviceCounters:
    """Cumulative ECC event counts of one Neuron device."""

    neuron_device_index: int
    mem_ecc_corrected: int = 0
    mem_ecc_uncorrected: int = 0
    sram_ecc_uncorrected: int = 0
    sram_ecc_corrected: int = 0


@dataclass(frozen=True)
class Snapshot:
    time: float  # daemon wall clock
    monotonic: float  # daemon monotonic clock: periods are computed from this one
    instance: InstanceIdentity
    hardware: HardwareInfo
    processes: tuple[ProcessSnapshot, ...]
    host: HostSnapshot
    hardware_counters: tuple[DeviceCounters, ...]
    # counters of exited processes (pid 0) and every recent execution as (sequence, latency);
    # absent from older daemons
    retired: ProcessSnapshot | None = None
    latency_log: tuple[tuple[int, Latency], ...] = ()

    def process(self, pid: int) -> ProcessSnapshot | None:
        return self._by_pid.get(pid)

    @cached_property
    def _by_pid(self) -> dict[int, ProcessSnapshot]:
        """Each PID's first process (made once, on first use: consumers look up every process)."""
        by_pid: dict[int, ProcessSnapshot] = {}
        for proc in self.processes:
            by_pid.setdefault(proc.pid, proc)
        return by_pid

    @property
    def runtime_processes(self) -> tuple[ProcessSnapshot, ...]:
        return tuple(p for p in self.processes if p.is_runtime)


# -- parsing --------------------------------------------------------------------------------------


def _host_usage(value: Any, where: str) -> HostMemoryUsage:
    return HostMemoryUsage(**_ints(_obj(value, where), HOST_MEMORY_KEYS, where))


def _subgraph(value: Any, where: str) -> Subgraph:
    data = _obj(value, where)
    mwhere = f"{where}.memory_used_bytes"
    mem = _obj(_get(data, "memory_used_bytes", where), mwhere)
    bwhere = f"{mwhere}.usage_breakdown"
    breakdown = _obj(_get(mem, "usage_breakdown", mwhere), bwhere)
    dwhere = f"{bwhere}.neuron_device"
    device = _obj(_get(breakdown, "neuron_device", bwhere), dwhere)
    return Subgraph(
        host=_int(_get(mem, "host", mwhere), f"{mwhere}.host"),
        neuron_device=_int(_get(mem, "neuron_device", mwhere), f"{mwhere}.neuron_device"),
        host_breakdown=_host_usage(_get(breakdown, "host", bwhere), f"{bwhere}.host"),
        device_breakdown=SubgraphDeviceMemory(**_ints(device, SUBGRAPH_DEVICE_MEMORY_KEYS, dwhere)),
        neuroncore_index=_int(_get(data, "neuroncore_index", where), f"{where}.neuroncore_index"),
        neuron_device_index=_int(_get(data, "neuron_device_index", where), f"{where}.neuron_device_index"),
    )


def _loaded_model(value: Any, where: str) -> LoadedModel:
    data = _obj(value, where)
    swhere = f"{where}.subgraphs"
    subgraphs = _obj(_get(data, "subgraphs", where), swhere)
    return LoadedModel(
        name=_str(_get(data, "name", where), f"{where}.name"),
        uuid=_str(_get(data, "uuid", where), f"{where}.uuid"),
        model_id=_int(_get(data, "model_id", where), f"{where}.model_id"),
        is_running=_bool(_get(data, "is_running", where), f"{where}.is_running"),
        subgraphs={name: _subgraph(sg, f"{swhere}[{name!r}]") for name, sg in subgraphs.items()},
    )


def _is_number(v: Any) -> bool:
    return type(v) is float or type(v) is int


def _latency(value: Any, where: str) -> Latency:
    # fast path first: snapshots carry thousands of these and are read every second
    if type(value) is list and len(value) == 3 and all(map(_is_number, value)):
        return Latency(float(value[0]), float(value[1]), float(value[2]))
    if not isinstance(value, list) or len(value) != 3:
        raise _fail(where, "[end, total, device]", value)
    end, total, device = (_num(v, f"{where}[{i}]") for i, v in enumerate(value))
    return Latency(end, total, device)


def _latencies(values: list[Any], where: str) -> tuple[Latency, ...]:
    return tuple(_latency(v, f"{where}[{i}]") for i, v in enumerate(values))


def _core_counters(value: Any, where: str) -> CoreCounters:
    data = _obj(value, where)
    ewhere = f"{where}.engines"
    engines = _obj(_get(data, "engines", where, {}), ewhere)
    return CoreCounters(
        busy=_num(_get(data, "busy", where), f"{where}.busy"),
        flops=_int(_get(data, "flops", where), f"{where}.flops"),
        engines={name: _num(v, f"{ewhere}.{name}") for name, v in engines.items()},
    )


def _keyed_by_core(value: Any, where: str, parse: Any) -> dict[int, Any]:
    data = _obj(value, where)
    parsed = {_core_key(k, where): parse(v, f"{where}[{k!r}]") for k, v in data.items()}
    return dict(sorted(parsed.items()))


def _collective(data: Mapping[str, Any], key: str, where: str) -> CollectiveCounters:
    value = _obj(_get(data, key, where, {}), f"{where}.{key}")
    cwhere = f"{where}.{key}"
    return CollectiveCounters(
        bytes=_int(_get(value, "bytes", cwhere, 0), f"{cwhere}.bytes"),
        operations=_int(_get(value, "operations", cwhere, 0), f"{cwhere}.operations"),
    )


class SectionMemo:
    """What parsing one snapshot may take over from the previous one (see ``SnapshotParser``):
    per (pid, section) the section's JSON and what it parsed to."""

    def __init__(self, previous: SectionMemo | None = None) -> None:
        self._previous = previous._kept if previous is not None else {}
        self._kept: dict[tuple[int, str], tuple[Any, Any]] = {}

    def section(self, pid: int, name: str, raw: Any, parse: Callable[[], T]) -> T:
        """``parse()``, or the previous snapshot's result when its JSON was equal."""
        known = self._previous.get((pid, name))
        result = known[1] if known is not None and known[0] == raw else parse()
        self._kept[(pid, name)] = (raw, result)
        return result


def _memory(value: Any, where: str) -> ProcessMemory:
    memory = _obj(value, where)
    return ProcessMemory(
        host=_host_usage(_get(memory, "host", where), f"{where}.host"),
        cores=_keyed_by_core(
            _get(memory, "cores", where),
            f"{where}.cores",
            lambda v, w: CoreMemoryUsage(**_ints(_obj(v, w), CORE_MEMORY_KEYS, w)),
        ),
    )


def process_from_dict(
    value: Any, where: str = "snapshot.processes[0]", *, memo: SectionMemo | None = None
) -> ProcessSnapshot:
    """One process of a snapshot; with ``memo``, its memory and loaded models may be the previous
    snapshot's (``SnapshotParser``)."""
    data = _obj(value, where)
    kind = _str(_get(data, "kind", where), f"{where}.kind")
    if kind not in PROCESS_KINDS:
        raise SnapshotError(f"{where}.kind: expected one of {', '.join(PROCESS_KINDS)}, got {kind!r}")
    cores_list = _arr(_get(data, "neuroncores", where, []), f"{where}.neuroncores")
    common = {
        "pid": _int(_get(data, "pid", where), f"{where}.pid"),
        "tag": _str(_get(data, "tag", where), f"{where}.tag"),
        "kind": kind,
        "command": _str(_get(data, "command", where, ""), f"{where}.command"),
        "runtime_version": _str(_get(data, "runtime_version", where, ""), f"{where}.runtime_version"),
        "neuroncores": tuple(_int(c, f"{where}.neuroncores[{i}]") for i, c in enumerate(cores_list)),
    }
    if kind != RUNTIME:
        return ProcessSnapshot(**common)

    cpu_raw = _get(data, "cpu", where)
    cpu = None
    if cpu_raw is not None:
        cpu_data = _obj(cpu_raw, f"{where}.cpu")
        cpu = CpuTimes(
            user=_num(_get(cpu_data, "user", f"{where}.cpu"), f"{where}.cpu.user"),
            system=_num(_get(cpu_data, "system", f"{where}.cpu"), f"{where}.cpu.system"),
        )
    mwhere, memory = f"{where}.memory", _get(data, "memory", where)
    cc_where = f"{where}.compile_cache"
    compile_cache = _obj(_get(data, "compile_cache", where, {}), cc_where)
    col_where = f"{where}.collectives"
    collectives = _obj(_get(data, "collectives", where, {}), col_where)
    latencies = _arr(_get(data, "latencies", where), f"{where}.latencies")
    lwhere = f"{where}.loaded_models"
    models = _arr(_get(data, "loaded_models", where), lwhere)
    ewhere, rwhere = f"{where}.executions", f"{where}.errors"

    def parse_memory() -> ProcessMemory:
        return _memory(memory, mwhere)

    def parse_models() -> tuple[LoadedModel, ...]:
        return tuple(_loaded_model(m, f"{lwhere}[{i}]") for i, m in enumerate(models))

    pid = common["pid"]
    return ProcessSnapshot(
        **common,
        cpu=cpu,
        cpu_error=_str(_get(data, "cpu_error", where, ""), f"{where}.cpu_error"),
        cores=_keyed_by_core(_get(data, "cores", where), f"{where}.cores", _core_counters),
        executions=ExecutionCounts(
            **_ints(_obj(_get(data, "executions", where), ewhere), EXECUTION_SUMMARY_KEYS, ewhere)
        ),
        errors=ErrorCounts(**_ints(_obj(_get(data, "errors", where), rwhere), ERROR_SUMMARY_KEYS, rwhere)),
        latencies=_latencies(latencies, f"{where}.latencies"),
        compile_cache=CompileCache(
            hits=_int(_get(compile_cache, "hits", cc_where, 0), f"{cc_where}.hits"),
            misses=_int(_get(compile_cache, "misses", cc_where, 0), f"{cc_where}.misses"),
        ),
        collectives=Collectives(
            neuronlink=_collective(collectives, "neuronlink", col_where),
            efa=_collective(collectives, "efa", col_where),
        ),
        # memory and models change rarely (the rest of a process every second): parsed only when they did
        memory=memo.section(pid, "memory", memory, parse_memory) if memo is not None else parse_memory(),
        loaded_models=memo.section(pid, "loaded_models", models, parse_models) if memo is not None else parse_models(),
    )


def _host(value: Any, where: str) -> HostSnapshot:
    data = _obj(value, where)
    vcpus = _arr(_get(data, "vcpus", where), f"{where}.vcpus")
    mwhere = f"{where}.memory"
    memory = _obj(_get(data, "memory", where), mwhere)
    return HostSnapshot(
        vcpus=tuple(
            VcpuTimes(
                **{
                    k: _num(_get(_obj(v, f"{where}.vcpus[{i}]"), k, f"{where}.vcpus[{i}]"), f"{where}.vcpus[{i}].{k}")
                    for k in VCPU_FIELDS
                }
            )
            for i, v in enumerate(vcpus)
        ),
        context_switches=_int(_get(data, "context_switches", where), f"{where}.context_switches"),
        memory=HostMemory(**_ints(memory, ("total", "used", "swap_total", "swap_used"), mwhere)),
    )


def _device_counters(value: Any, where: str) -> DeviceCounters:
    data = _obj(value, where)
    return DeviceCounters(**_ints(data, ("neuron_device_index", *HW_COUNTER_KEYS), where))


def snapshot_from_dict(data: Any, *, memo: SectionMemo | None = None) -> Snapshot:
    """Parse and validate one ``/v1/snapshot`` answer; raises ``SnapshotError`` naming the bad key.
    ``memo``: see ``SnapshotParser``."""
    where = "snapshot"
    root = _obj(data, where)
    iwhere, hwhere = f"{where}.instance", f"{where}.hardware"
    instance = _obj(_get(root, "instance", where), iwhere)
    hardware = _obj(_get(root, "hardware", where), hwhere)
    processes = _arr(_get(root, "processes", where), f"{where}.processes")
    counters = _arr(_get(root, "hardware_counters", where), f"{where}.hardware_counters")
    hw_values: dict[str, Any] = {}
    for key, kind in HARDWARE_INFO_KEYS:
        raw = _get(hardware, key, hwhere)
        hw_values[key] = _str(raw, f"{hwhere}.{key}") if kind is str else _int(raw, f"{hwhere}.{key}")
    return Snapshot(
        time=_num(_get(root, "time", where), f"{where}.time"),
        monotonic=_num(_get(root, "monotonic", where), f"{where}.monotonic"),
        instance=InstanceIdentity(**{k: _str(_get(instance, k, iwhere), f"{iwhere}.{k}") for k in INSTANCE_INFO_KEYS}),
        hardware=HardwareInfo(**hw_values),
        processes=tuple(process_from_dict(p, f"{where}.processes[{i}]", memo=memo) for i, p in enumerate(processes)),
        host=_host(_get(root, "host", where), f"{where}.host"),
        hardware_counters=tuple(_device_counters(c, f"{where}.hardware_counters[{i}]") for i, c in enumerate(counters)),
        retired=None if root.get("retired") is None else process_from_dict(root["retired"], f"{where}.retired"),
        latency_log=tuple(
            _logged_latency(v, f"{where}.latency_log[{i}]")
            for i, v in enumerate(_arr(_get(root, "latency_log", where, []), f"{where}.latency_log"))
        ),
    )


def _logged_latency(value: Any, where: str) -> tuple[int, Latency]:
    if type(value) is list and len(value) == 4 and type(value[0]) is int and all(map(_is_number, value[1:])):
        return value[0], Latency(float(value[1]), float(value[2]), float(value[3]))
    items = _arr(value, where)
    if len(items) != 4:
        raise _fail(where, "[sequence, end, total, device]", value)
    return _int(items[0], f"{where}[0]"), _latency(items[1:], where)


class SnapshotParser:
    """``snapshot_from_dict`` for successive snapshots of one daemon, reusing what did not change.

    A process's memory and loaded models (most of its JSON: nested objects) change when tensors
    are allocated or a model is loaded, while its counters change every second: they are parsed
    again only when their JSON differs from the previous snapshot's (comparing is several times
    cheaper than parsing), else the previous objects are used, so consumers can tell "unchanged"
    by identity. Validation is the same: equal JSON parsed without error before.
    """

    def __init__(self) -> None:
        self._memo: SectionMemo | None = None

    def parse(self, data: Any) -> Snapshot:
        memo = SectionMemo(self._memo)  # keeps only this snapshot's processes: exited ones are forgotten
        snapshot = snapshot_from_dict(data, memo=memo)
        self._memo = memo
        return snapshot


def fetch_snapshot(
    client: DaemonClient, latencies_since: float | None = None, parser: SnapshotParser | None = None
) -> Snapshot:
    """One snapshot from the daemon (``GET /v1/snapshot``).

    ``latencies_since`` (daemon monotonic seconds, e.g. ``ReportBuilder.latencies_since()``) asks
    for the latency lists of executions that ended later only; without it they cover the daemon's
    whole window (ten minutes), which is most of a busy snapshot's size.
    ``parser`` (one per daemon) reuses what did not change since its previous snapshot.
    Raises ``DaemonUnavailable`` / ``DaemonError`` from the client and ``SnapshotError`` for a malformed answer.
    """
    path = SNAPSHOT_PATH if latencies_since is None else f"{SNAPSHOT_PATH}?latencies_since={latencies_since!r}"
    data = client.get(path)
    return parser.parse(data) if parser is not None else snapshot_from_dict(data)
