"""The timeline of a capture: the ONE place absolute slices are derived (docs/profiling.md §Tracks).

For each profiled execution of a graph on a core:

* every op row of the graph's schedule goes on its engine's track (the DMA engine's on the DMA
  queue ``qSyncIO0``) at ``execution.start + op.start * slow_factor`` to
  ``execution.start + op.end * slow_factor``;
* each collective call runs on the ``CC-core`` track from its place in the op chain
  (``CollectiveCall.after_op``), one at a time; the ops from the one that first needs its result
  (``wait_op``, else the next) on move later by what of it no op in between hides
  (:mod:`neurontools.contract.overlap`; its seconds: :mod:`neurontools.profile.collectives`);
* when ``device_seconds`` outlasts the last slice, HBM traffic bound the graph: the rest is a
  slice on the ``HBM`` track;
* the modelled host time before the execution is a slice on the core's ``host`` track.

Counters: the core's HBM in use at each execution, and TensorE's busy fraction in
:data:`UTILIZATION_BINS` bins per execution.

The op slices are kept by column: an execution's :class:`Shape` (its ops relative to its start,
shared by every execution laid out the same way) and its start; :meth:`ExecutionLayout.op_slices`
makes them objects for whoever wants them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from neurontools.contract.profile import GraphSchedule, ProfiledExecution
from neurontools.profile.collectives import CallTime, call_times
from neurontools.profile.lanes import NEST_EPSILON
from neurontools.profile.load import Capture, DeviceProfile, ProcessCapture
from neurontools.profile.shape import Shape, ShapeKey, shape_key
from neurontools.profile.tracks import (
    CC_TRACK,
    COLLECTIVE,
    HBM_IN_USE,
    HBM_TAIL,
    HBM_TRACK,
    HOST,
    HOST_TRACK,
    OP,
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
    """One profiled execution laid out: its op slices (its :class:`Shape` moved to its start, on
    lanes from ``lane_base``), its other slices (collectives, HBM tail, host share) and calls."""

    process: ProcessCapture
    profile: DeviceProfile
    graph: GraphSchedule
    execution: ProfiledExecution
    ref: ExecRef
    rank: int | None
    shape: Shape
    others: tuple[Slice, ...]
    calls: tuple[tuple[CallTime, Slice], ...]
    lane_base: int = 0  # > 0 when the execution overlaps an earlier one on its core (docs/profiling.md §Tracks)

    @property
    def start(self) -> float:
        return self.execution.start

    @property
    def end(self) -> float:
        return self.execution.start + self.execution.device_seconds

    @property
    def ran(self) -> bool:
        """Whether it ran on the device (one failed by a hardware error, or blocked by a lost peer,
        has no device time, no engine time in its record and no op or collective slices)."""
        return self.execution.device_seconds > 0

    @property
    def op_count(self) -> int:
        return len(self.shape) if self.ran else 0

    def op_times(self) -> tuple[list[float], list[float]]:
        """Each op slice's start and end."""
        return self.shape.at(self.start) if self.ran else ([], [])

    def op_track(self, k: int) -> TrackId:
        return engine_track(self.ref.pid, self.ref.core, self.shape.rows[k], self.shape.lanes[k] + self.lane_base)

    def op_args(self, k: int) -> dict[str, Any]:
        ops = self.graph.ops
        return {
            "graph": self.graph.name,
            "rule": ops.rule[k],
            "shapes": ops.shapes[k],
            "flops": ops.flops[k],
            "hbm_read": ops.hbm_read[k],
            "hbm_write": ops.hbm_write[k],
            "op_index": ops.index[k],
        }

    def op_slice(self, k: int, start: float, end: float) -> Slice:
        """Op ``k`` as a :class:`Slice`, given its times (from :meth:`op_times`)."""
        name, seconds = self.graph.ops.name[k], self.shape.seconds[k]
        return Slice(self.op_track(k), name, start, end, OP, self.op_args(k), self.ref, seconds)

    def op_slices(self) -> list[Slice]:
        """The op slices as :class:`Slice` objects (the writers of large captures use the columns)."""
        starts, ends = self.op_times()
        return [self.op_slice(k, starts[k], ends[k]) for k in range(len(starts))]

    @property
    def slices(self) -> tuple[Slice, ...]:
        """Every slice of the execution, the ops first."""
        return (*self.op_slices(), *self.others)

    def device_slices(self) -> Iterator[Slice]:
        return (s for s in self.slices if s.kind != HOST)

    def extent(self) -> tuple[float, float]:
        """From the start of its first slice to the end of its last (the device time at least)."""
        low, high = self.start, self.end
        if self.op_count:
            first, last = self.shape.extent
            low, high = min(low, self.start + first), max(high, self.start + last)
        for s in self.others:
            low, high = min(low, s.start), max(high, s.end)
        return low, high


ShapeCache = dict[ShapeKey, Shape]


def layouts(capture: Capture) -> list[ExecutionLayout]:
    """Every profiled execution of the capture, laid out, in process, core and time order; an
    execution that overlaps an earlier one on its core has its op lanes above that one's."""
    out: list[ExecutionLayout] = []
    shapes: ShapeCache = {}
    for process in capture.processes:
        for profile in process.profiles:
            graph = process.graphs[profile.header.graph_hash]
            out.extend(lay_out(process, profile, graph, ex, shapes) for ex in profile.executions)
    return _stacked(out)


def _stacked(executions: list[ExecutionLayout]) -> list[ExecutionLayout]:
    """``executions`` with each one's ``lane_base`` above the lanes of the earlier executions of
    its core its op slices overlap (none, in a real capture: a core runs one execution at a time)."""
    by_core: dict[tuple[int, int], list[int]] = {}
    for n, lay in enumerate(executions):
        by_core.setdefault((lay.ref.pid, lay.ref.core), []).append(n)
    out = list(executions)
    for members in by_core.values():
        running: list[tuple[float, int]] = []  # (op extent end, first lane above it) of earlier ones
        for n in sorted(members, key=lambda m: executions[m].start):
            lay = executions[n]
            if not lay.op_count:
                continue
            first, last = (lay.start + t for t in lay.shape.extent)
            running = [r for r in running if r[0] > first + NEST_EPSILON]
            base = max((top for _, top in running), default=0)
            if base:
                out[n] = replace(lay, lane_base=base)
            running.append((last, base + lay.shape.lane_count))
    return out


def lay_out(
    process: ProcessCapture,
    profile: DeviceProfile,
    graph: GraphSchedule,
    ex: ProfiledExecution,
    shapes: ShapeCache | None = None,
) -> ExecutionLayout:
    core = profile.header.core
    pid = process.info.pid
    ref = ExecRef(pid, core, graph.hash, ex.step, ex.number)
    ran = ex.device_seconds > 0
    times = call_times(graph, profile.header, ex) if ran else []
    key = shape_key(graph, ex.slow_factor, times)
    shapes = {} if shapes is None else shapes
    if key not in shapes:
        shapes[key] = Shape.of(graph, ex.slow_factor, times)
    shape = shapes[key]
    calls = [(t, _call_slice(t, shape, ex, ref)) for t in times]
    others = [s for _, s in calls]
    last = max([ex.start + shape.extent[1] if ran and len(shape) else ex.start, *(s.end for s in others)])
    if ran and ex.start + ex.device_seconds > last + TAIL_EPSILON:
        others.append(_tail(graph, ex, ref, last, shape.shifts.exposed))
    if ex.host_seconds > 0:
        host = TrackId(pid, core, HOST_TRACK)
        args = {"graph": graph.name, "step": ex.step, "outcome": ex.outcome}
        others.append(Slice(host, "nrt_execute", ex.start - ex.host_seconds, ex.start, HOST, args, ref))
    rank = process.rank_of(core)
    return ExecutionLayout(process, profile, graph, ex, ref, rank, shape, tuple(others), tuple(calls))


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


def _call_slice(t: CallTime, shape: Shape, ex: ProfiledExecution, ref: ExecRef) -> Slice:
    start = ex.start + shape.shifts.call_span(t).start
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
    width = span / UTILIZATION_BINS
    shares = lay.shape.tensor_shares(span, UTILIZATION_BINS)
    points = [(lay.start + b * width, shares[b] / width) for b in range(UTILIZATION_BINS)]
    points.append((lay.end, 0.0))
    return points
