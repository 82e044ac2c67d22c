"""The text a person reads (docs/profiling.md §Viewing): ``summary-text`` (one block per process,
NeuronCore and graph, engines as rows) and ``show-session``'s table; and the JSON documents
(``summary-json``, ``json``)."""

from __future__ import annotations

from typing import Any

from neurontools.contract.profile import FORMAT_VERSION
from neurontools.profile.build import Timeline
from neurontools.profile.summary import Record
from neurontools.profile.timeline import ExecutionLayout
from neurontools.profile.tracks import COMPUTE_ENGINES, DMA, ENGINE_LABELS, GPSIMD, HBM_TAIL, SCALAR, TENSOR

CORES_PER_DEVICE = 2  # NeuronCore-v2s per Trainium1 device (docs/hardware-catalog.md)
NOT_DERIVED = "N/A"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:10.3f}"


def _pct(share: float) -> str:
    return f"{share * 100:7.1f} %"


def summary_text(records: list[Record]) -> str:
    if not records:
        return "no profiled executions in this capture\n"
    return "\n".join(_block(r) for r in records)


def _block(r: Record) -> str:
    rank = "-" if r["rank"] is None else r["rank"]
    runs = r["execution_count"]
    lines = [
        f"rank {rank}  pid {r['pid']}  NeuronCore {r['neuroncore']}  graph {r['graph_name']} ({r['graph_hash'][:12]})"
        f"  {runs} execution{'s' if runs != 1 else ''}, steps {', '.join(map(str, r['steps']))}",
        f"  {'total time':<22}{_ms(r['total_time'])} ms",
        f"  {'active':<22}{_ms(r['total_active_time'])} ms {_pct(r['total_active_time_percent'])}",
        f"  {'':<22}{'active (ms)':>10}    {'share':>7}",
    ]
    for engine in COMPUTE_ENGINES:
        key = f"{engine}_engine_active_time"
        lines.append(f"  {ENGINE_LABELS[engine]:<22}{_ms(r[key])}    {_pct(r[key + '_percent'])}")
    lines.append(f"  {ENGINE_LABELS[DMA]:<22}{_ms(r[f'{DMA}_active_time'])}    {_pct(r[f'{DMA}_active_time_percent'])}")
    lines.append(
        f"  {'collectives':<22}{_ms(r['cc_op_active_time'])}    {_pct(r['cc_op_active_time_percent'])}"
        f"  ({r['cc_op_count']} ops, {r['cc_op_time'] * 1e3:.3f} ms)"
    )
    mfu = ""
    if "peak_flops" in r:
        mfu = f"   MFU {_pct(r['mfu_estimated_percent'])}  (peak {r['peak_flops'] / 1e12:g} TFLOP/s)"
    mbu = (
        f"  MBU {_pct(r['mbu_estimated_percent'])}  (peak {r['hbm_bandwidth'] / 2**30:g} GiB/s)"
        if "hbm_bandwidth" in r
        else ""
    )
    lines += [
        f"  {'FLOPs':<22}{r['model_flops']:>10,}{mfu}",
        f"  {'HBM bytes':<22}read {r['hbm_read_bytes']:,}  write {r['hbm_write_bytes']:,}{mbu}",
        f"  {'events':<22}{r['event_count']:>10}",
    ]
    lines += [f"  ! {text}" for text in r["recommendations"]]
    return "\n".join(lines) + "\n"


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
    ops = [s for s in lay.device_slices() if s.kind != HBM_TAIL]
    count = {e: sum(1 for s in ops if s.track.engine == e) for e in (TENSOR, SCALAR, GPSIMD, DMA)}
    return [
        str(n),
        str(round(lay.execution.device_seconds * 1e9)),
        f"ND {core // CORES_PER_DEVICE} NC {core % CORES_PER_DEVICE}",
        lay.graph.name,
        NOT_DERIVED,
        NOT_DERIVED,
        str(len(ops)),
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
