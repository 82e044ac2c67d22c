"""A whole capture as one timeline (docs/profiling.md §Tracks): every execution laid out
(:mod:`neurontools.profile.timeline`), the system trace's events, the profiler steps, the counters
and the flows linking one collective call across ranks (:mod:`neurontools.profile.merge`).
Slices that would partly overlap on a row are moved to a second lane of it
(:mod:`neurontools.profile.lanes`), so every format can show each row as properly nested slices.

The op slices stay by column in their executions (a parallel job's capture has millions);
``Timeline.others`` holds every other slice and ``Timeline.slices`` all of them as objects."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cached_property

from neurontools.profile.lanes import lanes_of
from neurontools.profile.load import Capture, ProcessCapture
from neurontools.profile.merge import collective_flows
from neurontools.profile.timeline import ExecutionLayout, counters, layouts
from neurontools.profile.tracks import STEP, STEP_TRACK, SYSTEM, Counter, Flow, Slice, TrackId

CPU_UTIL = "cpu_util"


@dataclass(frozen=True)
class Timeline:
    capture: Capture
    executions: tuple[ExecutionLayout, ...]
    others: tuple[Slice, ...]  # every slice but the ops', each on its lane
    counters: tuple[Counter, ...]
    flows: tuple[Flow, ...]
    rows: bool = True  # False: only the executions (what the summaries read)

    @cached_property
    def slices(self) -> tuple[Slice, ...]:
        """Every slice, each on its lane: the executions' ops, then the others."""
        if not self.rows:
            return ()
        return (*(s for lay in self.executions for s in lay.op_slices()), *self.others)

    def tracks(self) -> list[TrackId]:
        """Every row that has a slice or a counter, sorted (process, host rows, then each core)."""
        found = {s.track for s in self.others} | {c.track for c in self.counters}
        if self.rows:
            found |= op_rows(self.executions)
        return sorted(found, key=lambda t: t.key)


def op_rows(executions: Iterable[ExecutionLayout]) -> set[TrackId]:
    """The rows (lanes included) the executions' ops are on."""
    seen: set[tuple[int, int, int, int]] = set()
    rows: set[TrackId] = set()
    for lay in executions:
        if lay.op_count and (id(lay.shape), lay.ref.pid, lay.ref.core, lay.lane_base) not in seen:
            seen.add((id(lay.shape), lay.ref.pid, lay.ref.core, lay.lane_base))
            rows.update(lay.op_track(k) for k in range(len(lay.shape)))
    return rows


def build(capture: Capture, *, rows: bool = True) -> Timeline:
    """The capture's timeline; without ``rows`` only its executions (what the summaries read): no
    system slices, counters, lanes or flows, which only the traces and the json format show."""
    executions = layouts(capture)
    if not rows:
        return Timeline(capture, tuple(executions), (), (), (), rows=False)
    slices: list[Slice] = [s for lay in executions for s in lay.others]
    counter_rows = counters(executions)
    for process in capture.processes:
        system, cpu = _system(process)
        slices.extend(system)
        counter_rows.extend(cpu)
        if not any(s.kind == STEP and s.track.pid == process.info.pid for s in system):
            slices.extend(_steps(process, [e for e in executions if e.process is process]))
    laned = nest_lanes(slices)
    moved = {id(old): new for old, new in zip(slices, laned, strict=True)}
    flows = [replace(f, source=moved[id(f.source)], target=moved[id(f.target)]) for f in collective_flows(executions)]
    return Timeline(capture, tuple(executions), tuple(laned), tuple(counter_rows), tuple(flows))


def _system(process: ProcessCapture) -> tuple[list[Slice], list[Counter]]:
    """The system trace: slices and instants on their rows, the CPU utilisation as a counter."""
    pid = process.info.pid
    slices, cpu = [], []
    for e in process.events:
        if e.kind == CPU_UTIL:
            cpu.append((e.ts, float(e.value or 0.0)))
            continue
        kind = STEP if e.kind == STEP else SYSTEM
        track = TrackId(pid, None, STEP_TRACK if kind == STEP else e.track)
        dur = max(e.dur, 0.0)
        slices.append(Slice(track, e.name, e.ts, e.ts + dur, kind, {"kind": e.kind, **e.args}, duration=dur))
    rows = [Counter(TrackId(pid, None, CPU_UTIL), "percent", tuple(sorted(cpu)))] if cpu else []
    return slices, rows


def _steps(process: ProcessCapture, executions: list[ExecutionLayout]) -> list[Slice]:
    """``ProfilerStep#N`` spans from the executions when the system trace has none: each step from
    its first execution's host time to its last execution's end."""
    spans: dict[int, tuple[float, float]] = {}
    for lay in executions:
        low, high = lay.extent()
        old = spans.get(lay.execution.step, (low, high))
        spans[lay.execution.step] = (min(old[0], low), max(old[1], high))
    track = TrackId(process.info.pid, None, STEP_TRACK)
    return [
        Slice(track, f"ProfilerStep#{step}", lo, hi, STEP, {"step": step}) for step, (lo, hi) in sorted(spans.items())
    ]


def nest_lanes(slices: Iterable[Slice]) -> list[Slice]:
    """``slices`` (same order) with each moved to the first lane of its row where it nests in, or
    follows, the slices already there."""
    items = list(slices)
    lanes = lanes_of([s.track.key for s in items], [s.start for s in items], [s.end for s in items])
    return [replace(s, track=replace(s.track, lane=lane)) if lane else s for s, lane in zip(items, lanes, strict=True)]
