"""``show-session``'s table and the whole timeline as JSON (``json``) (docs/profiling.md §Viewing);
``summary-text`` is :mod:`neurontools.profile.summary_text`, ``summary-json``
:func:`neurontools.profile.summary.summary_document`."""

from __future__ import annotations

from typing import Any

from neurontools.contract.profile import FORMAT_VERSION
from neurontools.profile.build import Timeline
from neurontools.profile.timeline import ExecutionLayout
from neurontools.profile.tracks import DMA, GPSIMD, SCALAR, TENSOR

CORES_PER_DEVICE = 2  # NeuronCore-v2s per Trainium1 device (docs/hardware-catalog.md)
NOT_DERIVED = "N/A"


SESSION_COLUMNS = (
    "NODE ID",
    "EXEC TIME (NS)",
    "EXECUTOR (ND d NC c)",
    "NAME (sg00)",
    "TRACE",
    "CYCLES",
    "EVENTS",
    "ERRORS",
    "TENSOR",
    "SCALAR",
    "GPSIMD",
    "DMA QUEUES",
    "SYNC",
)


def show_session(timeline: Timeline) -> str:
    """``show-session``: the profile's graph, then one row per profiled execution. TENSOR,
    SCALAR and GPSIMD count ops (the emulator's rows), not instructions; TRACE, CYCLES and SYNC
    are not derived (N/A)."""
    lays = list(timeline.executions)
    profile = timeline.capture.processes[0].profiles[0] if lays else None
    head = [
        f"Model Name: {profile.header.graph_name if profile else NOT_DERIVED}",
        f"UUID: {profile.header.graph_hash if profile else NOT_DERIVED}",
        f"Model ID: {profile.header.model_id if profile else NOT_DERIVED}",
        f"NTFF Version: {FORMAT_VERSION}",
        "",
    ]
    rows = [list(SESSION_COLUMNS)] + [_session_row(n, lay) for n, lay in enumerate(lays)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(SESSION_COLUMNS))]
    table = [" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(head + table) + "\n"


def _session_row(n: int, lay: ExecutionLayout) -> list[str]:
    core = lay.ref.core
    count = {e: lay.shape.op_count(e) if lay.op_count else 0 for e in (TENSOR, SCALAR, GPSIMD, DMA)}
    return [
        str(n),
        str(round(lay.execution.device_seconds * 1e9)),
        f"ND {core // CORES_PER_DEVICE} NC {core % CORES_PER_DEVICE}",
        lay.graph.name,
        NOT_DERIVED,
        NOT_DERIVED,
        str(lay.op_count + len(lay.calls)),
        "0" if lay.execution.outcome == "completed" else "1",
        str(count[TENSOR]),
        str(count[SCALAR]),
        str(count[GPSIMD]),
        str(1 if count[DMA] else 0),
        NOT_DERIVED,
    ]


def timeline_json(timeline: Timeline) -> dict[str, Any]:
    """The whole timeline: processes, rows (tracks) with their slices, counters and flows; times in
    seconds since the epoch."""
    from neurontools.profile.clock import Clock

    clock = Clock(timeline.capture)
    slices: dict[Any, list[dict[str, Any]]] = {}
    for s in sorted(timeline.slices, key=lambda s: (s.track.key, s.start)):
        start = clock.epoch(s.track.pid, s.start)
        row = {"name": s.name, "kind": s.kind, "start": start, "seconds": s.seconds, "args": s.args}
        slices.setdefault(s.track, []).append(row)
    counters = {c.track: c for c in timeline.counters}
    tracks = []
    for t in timeline.tracks():
        entry: dict[str, Any] = {"pid": t.pid, "core": t.core, "name": t.name, "lane": t.lane, "label": t.label}
        if t in counters:
            points = [[clock.epoch(t.pid, x), v] for x, v in counters[t].points]
            entry.update(counter=True, unit=counters[t].unit, points=points)
        else:
            entry.update(counter=False, slices=slices.get(t, []))
        tracks.append(entry)
    return {
        "format": "neuron-profile-timeline",
        "op_level": all(p.info.op_level for p in timeline.capture.processes),
        "processes": [
            {"pid": p.info.pid, "instance_id": p.info.instance_id, "ranks": p.info.ranks, "path": str(p.path)}
            for p in timeline.capture.processes
        ],
        "tracks": tracks,
        "flows": [
            {
                "id": f.id,
                "name": f.name,
                "from": [f.source.track.label, f.source.track.pid],
                "to": [f.target.track.label, f.target.track.pid],
            }
            for f in timeline.flows
        ],
    }
