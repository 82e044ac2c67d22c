"""The summary of a capture, one record per process, NeuronCore and graph, over its profiled
executions (docs/profiling.md §Summary fields). Field names and encodings are the real tool's
summary-json: times in seconds, every ``*_percent`` a FRACTION 0-1 of ``total_time``. What the
emulator cannot derive (instruction counts, SBUF/PSUM, spill, throttle, cycles) is absent.

``summary-json`` is :func:`summary_document`: the records under ``summary`` and the capture's
collective groups (:mod:`neurontools.profile.groups`) under ``collective_groups``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from neurontools.profile.build import Timeline
from neurontools.profile.groups import collective_groups
from neurontools.profile.intervals import length
from neurontools.profile.merge import Outlier, outliers
from neurontools.profile.timeline import ExecutionLayout
from neurontools.profile.tracks import COMPUTE_ENGINES, DMA

MFU_TO_ACTIVE_LOW = 0.5  # Explorer's rule: MFU below half of TensorE's active share

Record = dict[str, Any]
GroupKey = tuple[int, int, str]  # pid, core, graph hash


def summarize(timeline: Timeline) -> list[Record]:
    """One record per (process, core, graph), in timeline order, with its recommendations."""
    groups: dict[GroupKey, list[ExecutionLayout]] = {}
    for lay in timeline.executions:
        groups.setdefault((lay.ref.pid, lay.ref.core, lay.ref.graph), []).append(lay)
    slow = outliers(list(timeline.executions))
    return [record(lays, slow) for lays in groups.values()]


def summary_document(timeline: Timeline) -> dict[str, Any]:
    """``summary-json``: ``{"summary": [records], "collective_groups": [rows]}``."""
    rows = collective_groups(timeline.executions)
    return {"summary": summarize(timeline), "collective_groups": [g.to_json() for g in rows]}


def record(lays: Sequence[ExecutionLayout], slow: Sequence[Outlier] = ()) -> Record:
    """The record of ``lays``: executions of one graph on one core (one of them: that execution's
    own figures); ``slow``: the capture's collective outliers, for the recommendations."""
    first = lays[0]
    info = first.process.info
    total = sum(lay.execution.device_seconds for lay in lays)
    out: Record = {
        "pid": info.pid,
        "rank": first.rank,
        "neuroncore": first.ref.core,
        "graph_name": first.graph.name,
        "graph_hash": first.graph.hash,
        "execution_count": len(lays),
        "steps": sorted({lay.execution.step for lay in lays}),
        "total_time": total,
    }
    out.update(_activity(lays, total))
    out.update(_flops(lays, total, info.peak_flops, info.hbm_bandwidth))
    out.update(_collectives(lays, total))
    out["event_count"] = sum(lay.op_count + len(lay.calls) for lay in lays)
    out["recommendations"] = recommendations(out, [o for o in slow if _owns(first, o)])
    return out


def _share(part: float, total: float) -> float:
    return part / total if total > 0 else 0.0


def _activity(lays: Sequence[ExecutionLayout], total: float) -> Record:
    """Active time of the core (union of every busy row) and of each engine (its slices' sum)."""
    busy = [(lay.start + a, lay.start + b) for lay in lays if lay.op_count for a, b in lay.shape.busy]
    busy += [(s.start, s.end) for lay in lays for _, s in lay.calls]
    out: Record = {"total_active_time": length(busy)}
    seconds = _engine_seconds(lays)
    out["total_active_time_percent"] = _share(out["total_active_time"], total)
    for engine in COMPUTE_ENGINES:
        active = seconds.get(engine, 0.0)
        out[f"{engine}_engine_active_time"] = active
        out[f"{engine}_engine_active_time_percent"] = _share(active, total)
    out[f"{DMA}_active_time"] = seconds.get(DMA, 0.0)
    out[f"{DMA}_active_time_percent"] = _share(out[f"{DMA}_active_time"], total)
    return out


def _engine_seconds(lays: Sequence[ExecutionLayout]) -> dict[str, float]:
    """Each engine's busy seconds: the sum of its op slices' (the same in every execution of a shape)."""
    out: dict[str, float] = {}
    for lay in lays:
        if lay.op_count:
            for engine, seconds in lay.shape.engine_seconds.items():
                out[engine] = out.get(engine, 0.0) + seconds
    return out


def _flops(lays: Sequence[ExecutionLayout], total: float, peak: float, bandwidth: float) -> Record:
    flops = sum(lay.execution.flops for lay in lays)
    read = sum(lay.graph.hbm_read_bytes for lay in lays)
    write = sum(lay.graph.hbm_write_bytes for lay in lays)
    out: Record = {"model_flops": flops, "hardware_flops": flops, "hbm_read_bytes": read, "hbm_write_bytes": write}
    if peak > 0:  # a capture that does not say its core's peaks has no MFU/HFU (absent, not 0)
        out.update(peak_flops=peak, mfu_estimated_percent=_share(flops, peak * total))
        out["hfu_estimated_percent"] = out["mfu_estimated_percent"]
    if bandwidth > 0:
        out.update(hbm_bandwidth=bandwidth, mbu_estimated_percent=_share(read + write, bandwidth * total))
    return out


def _collectives(lays: Sequence[ExecutionLayout], total: float) -> Record:
    calls = [s for lay in lays for _, s in lay.calls]
    active = length((s.start, s.end) for s in calls)
    return {
        "cc_op_count": len(calls),
        "cc_op_time": sum(s.seconds for s in calls),
        "cc_op_active_time": active,
        "cc_op_active_time_percent": _share(active, total),
    }


def _owns(lay: ExecutionLayout, outlier: Outlier) -> bool:
    rank = lay.rank if lay.rank is not None else lay.ref.core
    return rank == outlier.rank and lay.ref.graph == outlier.graph


def recommendations(record: Record, slow: Sequence[Outlier]) -> list[str]:
    """Explorer's rules that apply: MFU low relative to TensorE's active time; this rank the
    slowest of a collective's replica group, far above the group's median."""
    out = []
    tensor = record[f"{COMPUTE_ENGINES[0]}_engine_active_time_percent"]
    mfu = record.get("mfu_estimated_percent")
    if mfu is not None and tensor > 0 and mfu / tensor < MFU_TO_ACTIVE_LOW:
        out.append(
            f"MFU {mfu:.1%} is {mfu / tensor:.0%} of TensorE's active share {tensor:.1%} (below "
            f"{MFU_TO_ACTIVE_LOW:.0%}): TensorE is busy with little math (small or badly shaped matmuls)"
        )
    for o in slow:
        out.append(
            f"{o.kind} (step {o.step}, call {o.call}) took {o.seconds * 1e3:.3f} ms on rank {o.rank}, "
            f"{o.seconds / o.median:.1f}x the median {o.median * 1e3:.3f} ms of its replica group {list(o.ranks)}"
        )
    return out
