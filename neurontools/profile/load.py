"""Reading a capture into typed objects (docs/profiling.md §Files): ``-d DIR`` (an output directory
of ``<instance-id>_pid_<pid>/`` capture directories, or one of them) or ``-s FILE`` (one device
profile, its graph file and ``trace_info.json`` beside it). Every problem is a :class:`LoadError`
or the contract's :class:`ProfileFormatError`: one line for the command to print."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from neurontools.contract.profile import (
    NTFF_NAME,
    PROCESS_DIR_NAME,
    SYSTEM_TRACE,
    TRACE_INFO,
    DeviceProfileHeader,
    GraphSchedule,
    ProfiledExecution,
    ProfileFormatError,
    SystemEvent,
    TraceInfo,
    neff_file,
    read_device_profile,
    read_graph,
    read_system_trace,
    read_trace_info,
)


class LoadError(ValueError):
    """A capture that cannot be read as asked: missing, empty, an unknown graph (one line)."""


@dataclass(frozen=True)
class DeviceProfile:
    """One core's profile of one graph: which file, its header, its profiled executions."""

    path: Path
    header: DeviceProfileHeader
    executions: tuple[ProfiledExecution, ...]


@dataclass(frozen=True)
class ProcessCapture:
    """One process's capture directory, read."""

    path: Path
    info: TraceInfo
    events: tuple[SystemEvent, ...]
    graphs: dict[str, GraphSchedule]  # by hash
    profiles: tuple[DeviceProfile, ...]

    def rank_of(self, core: int) -> int | None:
        return self.info.ranks.get(str(core))


@dataclass(frozen=True)
class Capture:
    """Every process of a capture, ordered by rank (then pid)."""

    processes: tuple[ProcessCapture, ...]
    source: str = ""
    graph_filter: str | None = field(default=None)

    @property
    def world_size(self) -> int:
        return max((p.info.world_size for p in self.processes), default=1)


def load(directory: str | None = None, session: str | None = None, graph: str | None = None) -> Capture:
    """The capture ``-d directory`` or ``-s session`` names, its profiles kept to ``graph`` (a graph
    name or a hash prefix) when given."""
    if (directory is None) == (session is None):
        raise LoadError("give one of -d DIR or -s FILE")
    if session is not None:
        processes = [_load_session(Path(session))]
        source = session
    else:
        processes = [_load_process(p) for p in _process_dirs(Path(str(directory)))]
        source = str(directory)
    if graph is not None:
        processes = _only_graph(processes, graph)
    processes.sort(key=lambda p: (min(p.info.ranks.values(), default=0), p.info.pid))
    return Capture(tuple(processes), source, graph)


def _process_dirs(root: Path) -> list[Path]:
    if not root.exists():
        raise LoadError(f"{root}: no such directory")
    if not root.is_dir():
        raise LoadError(f"{root}: not a directory (give a device profile with -s)")
    if (root / TRACE_INFO).is_file():
        return [root]
    try:
        found = sorted(
            p for p in root.iterdir() if p.is_dir() and PROCESS_DIR_NAME.match(p.name) and (p / TRACE_INFO).is_file()
        )
    except OSError as exc:
        raise LoadError(f"{root}: {exc.strerror or exc}") from None
    if not found:
        raise LoadError(f"{root}: no capture here (expected <instance-id>_pid_<pid>/ directories holding {TRACE_INFO})")
    return found


def _load_process(path: Path) -> ProcessCapture:
    info = read_trace_info(path / TRACE_INFO)
    trace = path / SYSTEM_TRACE
    events = tuple(read_system_trace(trace)) if trace.is_file() else ()
    profiles = [_read_profile(p) for p in sorted(path.glob("*.ntff"), key=_ntff_order) if NTFF_NAME.match(p.name)]
    hashes = sorted({p.header.graph_hash for p in profiles})
    graphs = {h: read_graph(path / neff_file(h)) for h in hashes if (path / neff_file(h)).is_file()}
    for h in hashes:  # a capture cut short before its graph file arrived: the rest stays readable
        if h not in graphs:
            print(
                f"neuron-profile: warning: {path / neff_file(h)} is missing; its device profiles are left out",
                file=sys.stderr,
            )
    kept = tuple(p for p in profiles if p.header.graph_hash in graphs)
    return ProcessCapture(path, info, events, graphs, kept)


def _ntff_order(path: Path) -> tuple[int, str]:
    m = NTFF_NAME.match(path.name)
    return (int(m.group("core")), m.group("hash")) if m else (-1, path.name)


def _load_session(path: Path) -> ProcessCapture:
    if not path.is_file():
        raise LoadError(f"{path}: no such file")
    info_path = path.parent / TRACE_INFO
    if not info_path.is_file():
        raise LoadError(f"{path}: no {TRACE_INFO} beside it")
    profile = _read_profile(path)
    graph_path = path.parent / neff_file(profile.header.graph_hash)
    if not graph_path.is_file():
        raise LoadError(f"{path}: its graph file {graph_path.name} is not beside it")
    graph = read_graph(graph_path)
    return ProcessCapture(path.parent, read_trace_info(info_path), (), {graph.hash: graph}, (profile,))


def _read_profile(path: Path) -> DeviceProfile:
    header, executions = read_device_profile(path)
    m = NTFF_NAME.match(path.name)
    if m is not None and m.group("hash") != header.graph_hash:
        raise ProfileFormatError(f"{path}: its header names graph {header.graph_hash}, its name another")
    return DeviceProfile(path, header, tuple(executions))


def _only_graph(processes: list[ProcessCapture], wanted: str) -> list[ProcessCapture]:
    """Each process with the profiles of the graph named ``wanted`` (or whose hash starts with it)."""
    known = {(g.name, g.hash) for p in processes for g in p.graphs.values()}
    hashes = {h for name, h in known if name == wanted} or {h for _, h in known if h.startswith(wanted)}
    if not wanted or not hashes:
        names = ", ".join(sorted(f"{n} ({h[:12]})" for n, h in known)) or "none"
        raise LoadError(f"no graph {wanted!r} in this capture (graphs: {names})")
    return [
        ProcessCapture(
            p.path,
            p.info,
            p.events,
            {h: g for h, g in p.graphs.items() if h in hashes},
            tuple(d for d in p.profiles if d.header.graph_hash in hashes),
        )
        for p in processes
    ]
