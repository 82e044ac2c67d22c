"""A window of the system trace as a Chrome trace-event file the way PyTorch's profiler (Kineto)
writes one: ``*.pt.trace.json``, opened by chrome://tracing, ui.perfetto.dev, TensorBoard's
PyTorch profiler plugin and Holistic Trace Analysis (docs/profiling.md §Capturing).

Mapping: the process's host events on ``pid`` = its PID, one ``tid`` per framework thread
(annotations ``user_annotation``, ``ProfilerStep#N``), compiles as ``cpu_op``; each NeuronCore is a
"device" ``pid`` = its index (as Kineto numbers GPUs), executions as ``kernel`` events on ``tid``
0 and host↔device transfers as ``gpu_memcpy`` events named ``Memcpy HtoD``/``Memcpy DtoH`` on
``tid`` 1 (the names HTA counts as memory traffic); CPU utilisation is a counter (``ph: C``).
Times are µs of the host's monotonic clock; ``baseTimeNanoseconds`` maps them to the epoch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from neurontools.contract.profile import SystemEvent, TraceInfo

US = 1e6
_MEMCPY = {"host_to_device": "Memcpy HtoD", "device_to_host": "Memcpy DtoH"}


def _host_tid(track: str) -> int:
    _, _, tid = track.partition("/TID:")
    return int(tid) if tid.isdigit() else 0


def trace_event(event: SystemEvent, pid: int) -> dict[str, Any]:
    """One system-trace event as a Chrome trace event."""
    base: dict[str, Any] = {"ts": event.ts * US, "args": dict(event.args)}
    if event.kind == "cpu_util":
        return {**base, "ph": "C", "name": "CPU utilization", "pid": pid, "args": {"percent": event.value}}
    if event.core is not None:  # on a NeuronCore
        if event.kind in _MEMCPY:
            name, cat, tid = f"{_MEMCPY[event.kind]} ({event.name})", "gpu_memcpy", 1
        else:
            name, cat, tid = str(event.args.get("graph", event.name))[:20], "kernel", 0
            base["args"]["event"] = event.name
        return {**base, "ph": "X", "cat": cat, "name": name, "pid": event.core, "tid": tid, "dur": event.dur * US}
    cat = {"annotation": "user_annotation", "step": "user_annotation"}.get(event.kind, "cpu_op")
    if event.dur == 0:
        return {**base, "ph": "i", "s": "t", "cat": cat, "name": event.name, "pid": pid, "tid": _host_tid(event.track)}
    return {
        **base,
        "ph": "X",
        "cat": cat,
        "name": event.name,
        "pid": pid,
        "tid": _host_tid(event.track),
        "dur": event.dur * US,
    }


def _metadata(pid: int, events: list[SystemEvent]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python"}}]
    for core in sorted({e.core for e in events if e.core is not None}):
        name = f"NeuronCore {core}"
        out.append({"ph": "M", "name": "process_name", "pid": core, "tid": 0, "args": {"name": name}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": core, "tid": 0, "args": {"sort_index": core}})
        for tid, label in ((0, "nrt_execute"), (1, "host<->device")):
            out.append({"ph": "M", "name": "thread_name", "pid": core, "tid": tid, "args": {"name": label}})
    for tid in sorted({_host_tid(e.track) for e in events if e.core is None and "/TID:" in e.track}):
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": f"thread {tid}"}})
    return out


def kineto_trace(events: Iterable[SystemEvent], info: TraceInfo, rank: int = 0) -> dict[str, Any]:
    """The Chrome trace-event document of ``events`` (see the module docstring)."""
    kept = sorted(events, key=lambda e: e.ts)
    pid = info.pid
    return {
        "schemaVersion": 1,
        "deviceProperties": [
            {"id": c, "name": "NeuronCore-v2 (emulated)"} for c in sorted({e.core for e in kept if e.core is not None})
        ],
        "distributedInfo": {"backend": "xla", "rank": rank, "world_size": info.world_size},
        "baseTimeNanoseconds": round((info.clock_epoch - info.clock_monotonic) * 1e9),
        "traceEvents": _metadata(pid, kept) + [trace_event(e, pid) for e in kept],
    }


def write_kineto_trace(logdir: str | Path, events: Iterable[SystemEvent], info: TraceInfo, rank: int = 0) -> Path:
    """``logdir/plugins/profile/<run>/<host>_<pid>.pt.trace.json`` (``<run>``: the local time,
    as TensorBoard's profile plugin names its runs); returns the path."""
    run = time.strftime("%Y_%m_%d_%H_%M_%S")
    directory = Path(logdir) / "plugins" / "profile" / run
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{info.hostname}_{info.pid}.pt.trace.json"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(kineto_trace(events, info, rank)))
    tmp.replace(path)
    return path
