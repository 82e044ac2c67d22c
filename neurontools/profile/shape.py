"""What every execution of one *shape* shares (docs/profiling.md §Tracks): its op slices relative
to the execution's start.

An op of a graph runs at ``start + shift + op.start * slow_factor`` to ``start + shift + op.end *
slow_factor``, where ``shift`` is the seconds of the collectives inserted before it. So two
executions of one graph with the same slow factor and the same collectives (positions and seconds)
lay their ops out identically, only moved in time: a shape is that layout, computed once (a
parallel job's capture has millions of op slices and a handful of shapes). It holds each op's
row and lane, the engines' busy seconds and TensorE's busy windows; :mod:`neurontools.profile.
timeline` adds the execution's start."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from neurontools.contract.overlap import CallSpan, place_calls
from neurontools.contract.profile import GraphSchedule
from neurontools.profile.collectives import CallTime
from neurontools.profile.intervals import binned, union
from neurontools.profile.lanes import lanes_of
from neurontools.profile.tracks import TENSOR, row_engine, row_of

ShapeKey = tuple[str, float, tuple[tuple[int, int, float], ...]]  # graph hash, slow factor, calls


def shape_key(graph: GraphSchedule, slow_factor: float, times: list[CallTime]) -> ShapeKey:
    return graph.hash, slow_factor, tuple((t.call.after_op, t.index, t.seconds) for t in times)


class Shifts:
    """Where each collective of an execution runs and how much later each op runs because of them
    (:func:`neurontools.contract.overlap.place_calls`; the same for every execution of a shape)."""

    def __init__(self, graph: GraphSchedule, slow_factor: float, times: list[CallTime]) -> None:
        ops = graph.ops
        order = sorted(times, key=lambda t: (t.call.after_op, t.index))
        calls = [(t.call.after_op, t.call.wait_op, t.seconds) for t in order]
        scaled = [s * slow_factor for s in ops.start], [e * slow_factor for e in ops.end]
        self.placement = place_calls(ops.index, *scaled, calls)
        self.spans = {t.index: span for t, span in zip(order, self.placement.spans, strict=True)}

    def of_op(self, index: int) -> float:
        """Seconds captured op ``index`` runs later than without collectives."""
        return self.placement.shift(index)

    def call_span(self, time: CallTime) -> CallSpan:
        """Where the call runs, after the execution's start."""
        return self.spans[time.index]

    @property
    def exposed(self) -> float:
        """Seconds the collectives add to the execution."""
        return self.placement.exposed


@dataclass
class Shape:
    """The ops of one graph as one shape of execution lays them out (module docstring)."""

    graph: GraphSchedule
    slow_factor: float
    segments: tuple[tuple[float, int, int], ...]  # (shift, first op, end op): ops sharing one shift
    scaled_start: tuple[float, ...]  # op.start * slow factor
    scaled_end: tuple[float, ...]
    seconds: tuple[float, ...]  # each op's busy seconds: (op.end - op.start) * slow factor
    rows: tuple[str, ...]  # each op's row (its engine's; the DMA queue for DMA)
    lanes: tuple[int, ...]
    shifts: Shifts
    _shares: dict[float, list[float]] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, graph: GraphSchedule, slow_factor: float, times: list[CallTime]) -> Shape:
        ops, sf = graph.ops, slow_factor
        shifts = Shifts(graph, slow_factor, times)
        segments: list[tuple[float, int, int]] = []
        for k in range(len(ops)):
            shift = shifts.of_op(ops.index[k])
            if segments and segments[-1][0] == shift:
                segments[-1] = (shift, segments[-1][1], k + 1)
            else:
                segments.append((shift, k, k + 1))
        start, end = tuple(s * sf for s in ops.start), tuple(e * sf for e in ops.end)
        rows = tuple(row_of(e) for e in ops.engine)
        rel_start, rel_end = _placed(segments, start, end, 0.0)
        return cls(
            graph,
            sf,
            tuple(segments),
            start,
            end,
            seconds=tuple((e - s) * sf for s, e in zip(ops.start, ops.end, strict=True)),
            rows=rows,
            lanes=tuple(lanes_of(rows, rel_start, rel_end)),
            shifts=shifts,
        )

    def __len__(self) -> int:
        return len(self.rows)

    def at(self, start: float) -> tuple[list[float], list[float]]:
        """Each op's absolute start and end in an execution that starts at ``start``."""
        return _placed(self.segments, self.scaled_start, self.scaled_end, start)

    @cached_property
    def relative(self) -> tuple[list[float], list[float]]:
        """Each op's start and end, in seconds after the execution's start."""
        return self.at(0.0)

    @cached_property
    def lane_count(self) -> int:
        return max(self.lanes, default=-1) + 1

    @cached_property
    def extent(self) -> tuple[float, float]:
        """The first op's start and the last op's end after the execution's start ((0, 0) if none)."""
        starts, ends = self.relative
        return (min(starts), max(ends)) if starts else (0.0, 0.0)

    @cached_property
    def engine_seconds(self) -> dict[str, float]:
        """Each engine's busy seconds: the sum of its ops' (in op order)."""
        out: dict[str, float] = {}
        for row, seconds in zip(self.rows, self.seconds, strict=True):
            engine = row_engine(row)
            if engine is not None:
                out[engine] = out.get(engine, 0.0) + seconds
        return out

    def op_count(self, engine: str) -> int:
        return sum(1 for row in self.rows if row_engine(row) == engine)

    @cached_property
    def busy(self) -> list[tuple[float, float]]:
        """The disjoint windows some op is busy in, after the execution's start."""
        return union(zip(*self.relative, strict=True))

    def tensor_shares(self, span: float, bins: int) -> list[float]:
        """TensorE's busy seconds in each of ``bins`` equal windows of ``span`` seconds from the start."""
        if span not in self._shares:
            starts, ends = self.relative
            busy = [(s, e) for s, e, r in zip(starts, ends, self.rows, strict=True) if row_engine(r) == TENSOR]
            self._shares[span] = binned(busy, 0.0, span / bins, bins)
        return self._shares[span]


def _placed(
    segments: Sequence[tuple[float, int, int]], starts: Sequence[float], ends: Sequence[float], at: float
) -> tuple[list[float], list[float]]:
    """The ops' starts and ends moved to an execution starting at ``at``: each segment's by its shift."""
    out_starts: list[float] = []
    out_ends: list[float] = []
    for shift, lo, hi in segments:
        base = at + shift
        out_starts.extend([base + s for s in starts[lo:hi]])
        out_ends.extend([base + e for e in ends[lo:hi]])
    return out_starts, out_ends
