"""The profile an emulated runtime writes and ``neuron-profile`` reads (docs/profiling.md §Files).

A capture is a directory per process, laid out as the real runtime lays it out:
``<output dir>/<instance-id>_pid_<pid>/`` holding

- ``trace_info.json`` — :class:`TraceInfo`: who wrote it (instance, pid, ranks), the clock, the settings;
- ``neff_<hash>.neff`` — :class:`GraphSchedule`: one graph ("NEFF") with the cost model's schedule of
  its ops on a healthy core (gzip-compressed JSON, the op table stored by columns);
- ``neff_<hash>_vnc_<core>.ntff`` — one device profile per NeuronCore and graph (JSON Lines): a
  :class:`DeviceProfileHeader`, then one :class:`ProfiledExecution` per profiled execution;
- ``ntrace.jsonl`` — the system trace (JSON Lines of :class:`SystemEvent`).

The formats are this project's own (the real NTFF is proprietary): documented in
docs/profiling.md, versioned by :data:`FORMAT_VERSION`, readable without torch or the emulator.
Every time is in seconds; absolute times are the host's ``time.monotonic()`` (one clock for every
process of a host), which ``TraceInfo.clock`` maps to the epoch.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from neurontools.contract.names import ENGINE_KEYS

FORMAT = "neurontools-profile"
FORMAT_VERSION = 1
TRACE_INFO = "trace_info.json"
SYSTEM_TRACE = "ntrace.jsonl"
DEFAULT_OUTPUT_DIR = "./output"
DEFAULT_MAX_EVENTS_PER_NC = 1_000_000
ENGINE_TRACKS = ENGINE_KEYS  # an op row's engine: one of the names of contract/names.py


class ProfileFormatError(ValueError):
    """A file that is not a profile of this version (truncated, foreign, newer): one line to show."""


# --- where things go -------------------------------------------------------------------------------


def process_dir_name(instance_id: str, pid: int) -> str:
    return f"{instance_id}_pid_{pid}"


def neff_file(graph_hash: str) -> str:
    return f"neff_{graph_hash}.neff"


def ntff_file(graph_hash: str, core: int) -> str:
    return f"neff_{graph_hash}_vnc_{core}.ntff"


NTFF_NAME = re.compile(r"^neff_(?P<hash>[0-9A-Za-z]+)_vnc_(?P<core>\d+)\.ntff$")
PROCESS_DIR_NAME = re.compile(r"^(?P<instance>.+)_pid_(?P<pid>\d+)$")


# --- the runtime's variables (docs/profiling.md §Capture) ------------------------------------------


@dataclass(frozen=True)
class InspectSettings:
    """``NEURON_RT_INSPECT_*`` as the runtime reads them. ``device``: ``off``, ``model`` (the first
    execution of each graph) or ``session`` (every execution); ``cores``: the NeuronCores whose
    events are kept (None: all)."""

    enabled: bool = False
    output_dir: str = DEFAULT_OUTPUT_DIR
    device: str = "model"
    system: bool = True
    max_events_per_nc: int = DEFAULT_MAX_EVENTS_PER_NC
    cores: frozenset[int] | None = None

    def keeps(self, core: int) -> bool:
        return self.cores is None or core in self.cores


_DEVICE_MODES = {"0": "off", "1": "model", "model": "model", "session": "session"}


def inspect_settings(env: Mapping[str, str]) -> InspectSettings:
    """The settings ``env`` asks for; ValueError (one line) for a value the runtime would refuse."""
    enabled = _flag(env, "NEURON_RT_INSPECT_ENABLE", False)
    if not enabled:
        return InspectSettings()
    mode = env.get("NEURON_RT_INSPECT_DEVICE_PROFILE", "1").strip().lower() or "1"
    if mode not in _DEVICE_MODES:
        raise ValueError(f"NEURON_RT_INSPECT_DEVICE_PROFILE={mode!r}: expected 0, 1, model or session")
    raw_max = env.get("NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC", "").strip()
    try:
        max_events = int(raw_max) if raw_max else DEFAULT_MAX_EVENTS_PER_NC
    except ValueError:
        raise ValueError(f"NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC={raw_max!r} is not an integer") from None
    if max_events < 0:
        raise ValueError(f"NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC={max_events} must be >= 0")
    raw_filter = env.get("NEURON_RT_INSPECT_EVENT_FILTER_NC", "").strip()
    return InspectSettings(
        enabled=True,
        output_dir=env.get("NEURON_RT_INSPECT_OUTPUT_DIR", "").strip() or DEFAULT_OUTPUT_DIR,
        device=_DEVICE_MODES[mode],
        system=_flag(env, "NEURON_RT_INSPECT_SYSTEM_PROFILE", True),
        max_events_per_nc=max_events,
        cores=parse_core_filter(raw_filter) if raw_filter else None,
    )


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name}={raw!r}: expected 0 or 1")


def parse_core_filter(text: str) -> frozenset[int]:
    """``"0-3,8"`` -> {0, 1, 2, 3, 8}; ValueError for anything else."""
    cores: set[int] = set()
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if m is None:
            raise ValueError(f"NEURON_RT_INSPECT_EVENT_FILTER_NC={text!r}: expected core ids and ranges like 0-3,8")
        low, high = int(m.group(1)), int(m.group(2) or m.group(1))
        if high < low:
            raise ValueError(f"NEURON_RT_INSPECT_EVENT_FILTER_NC={text!r}: range {low}-{high} is empty")
        cores.update(range(low, high + 1))
    return frozenset(cores)


# --- the records ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpTable:
    """The graph's ops in capture order, by column (one entry per op that costs device time).
    ``start``/``end``: seconds from the execution's start on a healthy core, collectives left
    out (they are inserted at their positions by the reader: docs/profiling.md §Device timeline);
    ``rule``: what bound the op in the cost model (``compute``, ``memory``, ``overhead``) and its
    kind, e.g. ``compute/matmul``; ``shapes``: ``bfloat16[4,128] float32[128,512] -> ...``."""

    name: tuple[str, ...] = ()
    engine: tuple[str, ...] = ()
    rule: tuple[str, ...] = ()
    start: tuple[float, ...] = ()
    end: tuple[float, ...] = ()
    flops: tuple[int, ...] = ()
    hbm_read: tuple[int, ...] = ()
    hbm_write: tuple[int, ...] = ()
    shapes: tuple[str, ...] = ()
    index: tuple[int, ...] = ()  # position in the captured op list (free ops included)

    def __len__(self) -> int:
        return len(self.name)

    def __post_init__(self) -> None:
        n = len(self.name)
        for f in fields(self):
            column = getattr(self, f.name)
            if len(column) != n:
                raise ProfileFormatError(f"op table column {f.name!r} has {len(column)} rows, not {n}")
            allowed = _JSON_TYPES[_element_type(str(f.type))]
            if not all(_is(v, allowed) for v in column):
                raise ProfileFormatError(f"op table column {f.name!r} holds a value that is not {f.type}")


@dataclass(frozen=True)
class CollectiveCall:
    """A collective of the graph: after which captured op it runs (``after_op``: the number of
    captured ops before it), its kind, payload and the group it runs over (``tp``, ``dp``, ...);
    ``wait_op``: the captured op that first needs its result (None: the next one) — the ops
    between run while it does (neurontools/contract/overlap.py)."""

    after_op: int
    kind: str
    bytes: int
    group: str = ""
    wait_op: int | None = None


@dataclass(frozen=True)
class GraphSchedule:
    """A graph ("NEFF") and the cost model's schedule of it on a healthy NeuronCore.
    ``compute_seconds``: its device time without collectives (which may exceed the last op's
    end when HBM traffic bounds it); ``busy``: each engine's busy seconds (the op table's sums)."""

    hash: str
    name: str
    compute_seconds: float
    hbm_seconds: float
    busy: dict[str, float]
    flops: int
    hbm_read_bytes: int
    hbm_write_bytes: int
    captured_ops: int
    ops: OpTable
    collectives: tuple[CollectiveCall, ...] = ()
    efficiency: float = 1.0  # the compiler-efficiency factor every op time is divided by


@dataclass(frozen=True)
class CollectivePlacement:
    """One collective call of the graph as this core runs it: its replica group (global ranks and
    NeuronCores), the link type its time counts on, the algorithm and the bus bandwidth the cost
    model gave it, and its seconds on a healthy core."""

    call: int  # index into GraphSchedule.collectives
    ranks: tuple[int, ...]
    cores: tuple[int, ...]
    link: str
    algorithm: str
    bus_bandwidth: float
    seconds: float


@dataclass(frozen=True)
class DeviceProfileHeader:
    """First line of a device profile: the core and graph it is about."""

    graph_hash: str
    graph_name: str
    core: int  # the NeuronCore on the instance
    rank: int = 0
    world_size: int = 1
    node: int = 0
    model_id: int = 0
    collectives: tuple[CollectivePlacement, ...] = ()
    format: str = FORMAT
    version: int = FORMAT_VERSION


@dataclass(frozen=True)
class ExecutedCollective:
    """A collective as the execution reported it to the daemon (``count`` identical ones, each
    ``seconds`` long, faults applied)."""

    kind: str
    bytes: int
    ranks: int
    nodes: int
    count: int
    seconds: float
    link_bytes: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ProfiledExecution:
    """One execution of the graph on the core, the very record the daemon counted (docs/snapshot.md):
    its start (monotonic), device seconds, the host time before it, outcome, FLOPs, engine busy
    seconds and collectives; ``slow_factor``: how much longer than healthy every op took."""

    step: int
    number: int  # executions of this graph on this core so far, this one included
    start: float
    device_seconds: float
    host_seconds: float
    outcome: str
    flops: int
    engines: dict[str, float]
    collectives: tuple[ExecutedCollective, ...] = ()
    hbm_in_use: int = 0
    slow_factor: float = 1.0


@dataclass(frozen=True)
class SystemEvent:
    """One event of the system trace. ``kind``: ``nrt_execute``, ``compile``, ``cache_hit``,
    ``host_to_device``, ``device_to_host``, ``step`` (``ProfilerStep#N``), ``annotation`` (a
    framework annotation), ``cpu_util`` (a counter: ``value`` percent of one CPU); ``track``:
    ``neuron_rt/NC:<k>``, ``framework/TID:<tid>`` or ``cpu``; ``dur`` 0 for instants and counters."""

    kind: str
    name: str
    ts: float
    dur: float = 0.0
    track: str = "neuron_rt"
    core: int | None = None
    value: float | None = None
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TraceInfo:
    """Who wrote a capture directory: the instance, the process, its ranks and NeuronCores, the
    clock (``monotonic`` and ``epoch`` read at one instant), and what was asked."""

    instance_id: str
    instance_type: str
    pid: int
    hostname: str
    clock_monotonic: float
    clock_epoch: float
    device_profile: str
    system_profile: bool
    ranks: dict[str, int] = field(default_factory=dict)  # core (as a string) -> global rank
    world_size: int = 1
    command: str = ""
    op_level: bool = True  # the device timeline is per ATen op, not per instruction
    peak_flops: float = 0.0  # a NeuronCore's TensorE BF16 peak, FLOP/s (the writer's hardware catalog)
    hbm_bandwidth: float = 0.0  # a NeuronCore's share of the HBM bandwidth, bytes/s (the same)
    format: str = FORMAT
    version: int = FORMAT_VERSION


# --- JSON ------------------------------------------------------------------------------------------


def to_json(record: Any) -> dict[str, Any]:
    return asdict(record)


# What a JSON value of each annotated field type may be (bool is no number here).
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "int | None": (int, type(None)),
    "float | None": (int, float, type(None)),
}


def _check_types(cls: type, values: dict[str, Any], what: str) -> None:
    """A foreign file must fail here with one line, not later with a TypeError deep in a reader."""
    for f in fields(cls):
        if f.name not in values:
            continue
        value, hint = values[f.name], str(f.type)
        allowed = _JSON_TYPES.get(hint)
        if hint.startswith("dict"):
            allowed = (dict,)
        elif hint.startswith("tuple"):
            allowed = (tuple, list)
        if allowed is None:
            continue
        if not _is(value, allowed):
            raise ProfileFormatError(f"{what}: {f.name} is {type(value).__name__}, expected {hint}")
        items = value.values() if isinstance(value, dict) else value if isinstance(value, tuple | list) else ()
        inner = _JSON_TYPES.get(_element_type(hint))
        if inner is not None and not all(_is(v, inner) for v in items):
            raise ProfileFormatError(f"{what}: {f.name} holds a value that is not {hint}")


def _element_type(hint: str) -> str:
    """``tuple[int, ...]`` -> ``int``; ``dict[str, float]`` -> ``float``."""
    if hint.startswith("tuple["):
        return hint.removeprefix("tuple[").removesuffix(", ...]")
    if hint.startswith("dict["):
        return hint.rpartition(", ")[2].removesuffix("]")
    return ""


def _is(value: Any, allowed: tuple[type, ...]) -> bool:
    return isinstance(value, allowed) and (bool in allowed or not isinstance(value, bool))


def _build(cls: type, data: Any, what: str) -> Any:
    if not isinstance(data, dict):
        raise ProfileFormatError(f"{what}: expected a JSON object")
    names = {f.name for f in fields(cls)}
    values = {k: v for k, v in data.items() if k in names}
    _check_types(cls, values, what)
    try:
        return cls(**values)
    except TypeError as exc:
        raise ProfileFormatError(f"{what}: {exc}") from None


def _check_version(data: Any, what: str) -> None:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ProfileFormatError(f"{what} is not a {FORMAT} file")
    if data.get("version") != FORMAT_VERSION:
        found = data.get("version")
        raise ProfileFormatError(f"{what} is format version {found!r}; this reader reads {FORMAT_VERSION}")


def graph_to_json(graph: GraphSchedule) -> dict[str, Any]:
    return {"format": FORMAT, "version": FORMAT_VERSION, **asdict(graph)}


def _columns(data: Any, what: str) -> dict[str, tuple[Any, ...]]:
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise ProfileFormatError(f"{what}: expected an object of columns (lists)")
    return {k: tuple(v) for k, v in data.items()}


def _objects(data: Any, what: str) -> list[dict[str, Any]]:
    if not isinstance(data, list) or not all(isinstance(v, dict) for v in data):
        raise ProfileFormatError(f"{what}: expected a list of objects")
    return data


def graph_from_json(data: Any, what: str = "graph") -> GraphSchedule:
    _check_version(data, what)
    ops = _build(OpTable, _columns(data.get("ops", {}), f"{what} ops"), f"{what} ops")
    calls = tuple(_build(CollectiveCall, c, f"{what} collective") for c in _objects(data.get("collectives", []), what))
    return _build(GraphSchedule, {**data, "ops": ops, "collectives": calls}, what)


def header_from_json(data: Any, what: str = "device profile") -> DeviceProfileHeader:
    _check_version(data, what)
    placements = tuple(
        _build(CollectivePlacement, {**c, **_columns({k: c.get(k, []) for k in ("ranks", "cores")}, what)}, what)
        for c in _objects(data.get("collectives", []), what)
    )
    return _build(DeviceProfileHeader, {**data, "collectives": placements}, what)


def execution_from_json(data: Any, what: str = "execution") -> ProfiledExecution:
    if not isinstance(data, dict):
        raise ProfileFormatError(f"{what}: expected a JSON object")
    collectives = tuple(_build(ExecutedCollective, c, what) for c in _objects(data.get("collectives", []), what))
    return _build(ProfiledExecution, {**data, "collectives": collectives}, what)


def trace_info_from_json(data: Any, what: str = TRACE_INFO) -> TraceInfo:
    _check_version(data, what)
    return _build(TraceInfo, data, what)


def event_from_json(data: Any, what: str = SYSTEM_TRACE) -> SystemEvent:
    return _build(SystemEvent, data, what)


# --- files -----------------------------------------------------------------------------------------


def write_graph(path: Path, graph: GraphSchedule) -> None:
    """Write the NEFF file (gzip JSON) atomically: a reader never sees half of one."""
    tmp = path.with_name(path.name + ".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as out:
        json.dump(graph_to_json(graph), out, separators=(",", ":"))
    tmp.replace(path)


def read_graph(path: Path) -> GraphSchedule:
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProfileFormatError(f"{path}: not a readable graph file ({exc.__class__.__name__})") from None
    return graph_from_json(data, str(path))


def json_line(record: Any) -> str:
    return json.dumps(asdict(record), separators=(",", ":")) + "\n"


def read_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line number, object)`` of a JSON Lines file; a truncated last line (a process killed
    mid-write) ends it, any other bad line raises ProfileFormatError."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileFormatError(f"{path}: not readable ({exc.__class__.__name__})") from None
    for number, line in enumerate(lines, 1):
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines) and not line.endswith("\n"):
                return
            raise ProfileFormatError(f"{path}:{number}: not a JSON line") from None


def read_device_profile(path: Path) -> tuple[DeviceProfileHeader, list[ProfiledExecution]]:
    rows = read_lines(path)
    first = next(rows, None)
    if first is None:
        raise ProfileFormatError(f"{path}: empty device profile")
    header = header_from_json(first[1], str(path))
    return header, [execution_from_json(data, f"{path}:{n}") for n, data in rows]


def read_system_trace(path: Path) -> list[SystemEvent]:
    return [event_from_json(data, f"{path}:{n}") for n, data in read_lines(path)]


def read_trace_info(path: Path) -> TraceInfo:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProfileFormatError(f"{path}: not a readable trace info ({exc.__class__.__name__})") from None
    return trace_info_from_json(data, str(path))
