"""The timeline of a capture: the ONE place absolute slices are derived (docs/profiling.md §Tracks).

For each profiled execution of a graph on a core:

* every op row of the graph's schedule goes on its engine's track (the DMA engine's on the DMA
  queue ``qSyncIO0``) at ``execution.start + op.start * slow_factor`` to
  ``execution.start + op.end * slow_factor``;
* each collective call is inserted at its position: the ops captured after it (``OpTable.index >=
  CollectiveCall.after_op``) move later by its seconds (:mod:`neurontools.profile.collectives`),
  and it runs on the ``CC-core`` track from where the first of those ops would have started;
* when ``device_seconds`` outlasts the last slice, HBM traffic bound the graph: the rest is a
  slice on the ``HBM`` track;
* the modelled host time before the execution is a slice on the core's ``host`` track.

Counters: the core's HBM in use at each execution, and TensorE's busy fraction in
:data:`UTILIZATION_BINS` bins per execution.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass

from neurontools.contract.profile import GraphSchedule, ProfiledExecution
from neurontools.profile.collectives import CallTime, call_times
from neurontools.profile.intervals import binned
from neurontools.profile.load import Capture, DeviceProfile, ProcessCapture
from neurontools.profile.tracks import (
    CC_TRACK,
    COLLECTIVE,
    HBM_IN_USE,
    HBM_TAIL,
    HBM_TRACK,
    HOST,
    HOST_TRACK,
    OP,
    TENSOR,
    TENSOR_UTILIZATION,
    UTILIZATION_BINS,
    Counter,
    ExecRef,
    Slice,
    TrackId,
    engine_track,
)

TAIL_EPSILON = 1e-12  # seconds: a tail shorter than this is float rounding, not HBM time


@dataclass(frozen=True)
class ExecutionLayout:
    """One profiled execution laid out: its slices (ops, collectives, HBM tail, host) and calls."""

    process: ProcessCapture
    profile: DeviceProfile
    graph: GraphSchedule
    execution: ProfiledExecution
    ref: ExecRef
    rank: int | None
    slices: tuple[Slice, ...]
    calls: tuple[tuple[CallTime, Slice], ...]

    @property
    def start(self) -> float:
        return self.execution.start

    @property
    def end(self) -> float:
        return self.execution.start + self.execution.device_seconds

    def device_slices(self) -> Iterator[Slice]:
        return (s for s in self.slices if s.kind != HOST)


def layouts(capture: Capture) -> list[ExecutionLayout]:
    """Every profiled execution of the capture, laid out, in process, core and time order."""
    out: list[ExecutionLayout] = []
    for process in capture.processes:
        for profile in process.profiles:
            graph = process.graphs[profile.header.graph_hash]
            out.extend(lay_out(process, profile, graph, ex) for ex in profile.executions)
    return out


def lay_out(
    process: ProcessCapture, profile: DeviceProfile, graph: GraphSchedule, ex: ProfiledExecution
) -> ExecutionLayout:
    core = profile.header.core
    pid = process.info.pid
    ref = ExecRef(pid, core, graph.hash, ex.step, ex.number)
    # an execution that never ran on the device (failed by a hardware error, or blocked by a lost
    # peer: no device time, no engine time in its record) has no op or collective slices
    ran = ex.device_seconds > 0
    times = call_times(graph, profile.header, ex) if ran else []
    shifts = _Shifts(times)
    slices = list(_op_slices(graph, ex, ref, shifts)) if ran else []
    calls = [(t, _call_slice(t, graph, ex, ref, shifts)) for t in times]
    slices.extend(s for _, s in calls)
    last = max((s.end for s in slices), default=ex.start)
    if ran and ex.start + ex.device_seconds > last + TAIL_EPSILON:
        slices.append(_tail(graph, ex, ref, last, sum(t.seconds for t in times)))
    if ex.host_seconds > 0:
        host = TrackId(pid, core, HOST_TRACK)
        args = {"graph": graph.name, "step": ex.step, "outcome": ex.outcome}
        slices.append(Slice(host, "nrt_execute", ex.start - ex.host_seconds, ex.start, HOST, args, ref))
    rank = process.rank_of(core)
    return ExecutionLayout(process, profile, graph, ex, ref, rank, tuple(slices), tuple(calls))


def _tail(graph: GraphSchedule, ex: ProfiledExecution, ref: ExecRef, last: float, collectives: float) -> Slice:
    """The device time after the last slice: HBM traffic when the graph's HBM bytes bound it (its
    compute time is the HBM stream time), else the chain's drain (an op's own time can end before
    it has streamed its producer's last tile: docs/cost-model.md)."""
    end = ex.start + ex.device_seconds
    hbm = graph.hbm_seconds * ex.slow_factor
    hbm_bound = abs(hbm + collectives - ex.device_seconds) <= 1e-9 * ex.device_seconds
    name = "HBM traffic" if hbm_bound else "pipeline drain"
    args = {"graph": graph.name, "hbm_seconds": hbm, "bound": "hbm" if hbm_bound else "chain"}
    return Slice(TrackId(ref.pid, ref.core, HBM_TRACK), name, last, end, HBM_TAIL, args, ref)


class _Shifts:
    """How much later each op runs because of the collectives inserted before it."""

    def __init__(self, times: list[CallTime]) -> None:
        self.order = sorted(times, key=lambda t: (t.call.after_op, t.index))
        self.after = [t.call.after_op for t in self.order]
        self.total = [0.0]
        for t in self.order:
            self.total.append(self.total[-1] + t.seconds)

    def of_op(self, index: int) -> float:
        """Seconds of every collective placed before captured op ``index``."""
        return self.total[bisect.bisect_right(self.after, index)]

    def before_call(self, time: CallTime) -> float:
        """Seconds of the collectives that run before this one."""
        return self.total[self.order.index(time)]


def _op_slices(graph: GraphSchedule, ex: ProfiledExecution, ref: ExecRef, shifts: _Shifts) -> Iterator[Slice]:
    ops, sf = graph.ops, ex.slow_factor
    for k in range(len(ops)):
        shift = shifts.of_op(ops.index[k])
        args = {
            "graph": graph.name,
            "rule": ops.rule[k],
            "shapes": ops.shapes[k],
            "flops": ops.flops[k],
            "hbm_read": ops.hbm_read[k],
            "hbm_write": ops.hbm_write[k],
            "op_index": ops.index[k],
        }
        start, end = ex.start + shift + ops.start[k] * sf, ex.start + shift + ops.end[k] * sf
        track = engine_track(ref.pid, ref.core, ops.engine[k])
        yield Slice(track, ops.name[k], start, end, OP, args, ref, (ops.end[k] - ops.start[k]) * sf)


def _call_slice(t: CallTime, graph: GraphSchedule, ex: ProfiledExecution, ref: ExecRef, shifts: _Shifts) -> Slice:
    ops, sf = graph.ops, ex.slow_factor
    # op starts never decrease along the schedule's chain: the first op captured after the call
    # is the earliest of those it delays
    first = bisect.bisect_left(ops.index, t.call.after_op)
    base = ops.start[first] if first < len(ops) else max(ops.end, default=0.0)
    start = ex.start + base * sf + shifts.before_call(t)
    p = t.placement
    args = {
        "kind": t.call.kind,
        "bytes": t.call.bytes,
        "group": t.call.group,
        "call": t.index,
        "step": ex.step,
        "replica_group": list(p.ranks) if p else [],
        "cores": list(p.cores) if p else [],
        "link": p.link if p else "",
        "algorithm": p.algorithm if p else "",
        "bus_bandwidth": p.bus_bandwidth if p else 0.0,
        "seconds_from": t.source,
    }
    track = TrackId(ref.pid, ref.core, CC_TRACK)
    return Slice(track, t.call.kind, start, start + t.seconds, COLLECTIVE, args, ref, t.seconds)


def counters(executions: list[ExecutionLayout]) -> list[Counter]:
    """HBM in use and TensorE utilisation, one row each per process and core."""
    hbm: dict[TrackId, list[tuple[float, float]]] = {}
    util: dict[TrackId, list[tuple[float, float]]] = {}
    for lay in sorted(executions, key=lambda e: e.start):
        pid, core = lay.ref.pid, lay.ref.core
        hbm.setdefault(TrackId(pid, core, HBM_IN_USE), []).append((lay.start, float(lay.execution.hbm_in_use)))
        util.setdefault(TrackId(pid, core, TENSOR_UTILIZATION), []).extend(_utilization(lay))
    return [Counter(t, "bytes", tuple(p)) for t, p in hbm.items()] + [
        Counter(t, "fraction", tuple(p)) for t, p in util.items()
    ]


def _utilization(lay: ExecutionLayout) -> list[tuple[float, float]]:
    span = lay.execution.device_seconds
    if span <= 0:
        return []
    busy = [(s.start, s.end) for s in lay.slices if s.kind == OP and s.track.engine == TENSOR]
    width = span / UTILIZATION_BINS
    shares = binned(busy, lay.start, width, UTILIZATION_BINS)
    points = [(lay.start + b * width, shares[b] / width) for b in range(UTILIZATION_BINS)]
    points.append((lay.end, 0.0))
    return points
