"""The collective groups of a capture (docs/profiling.md §Collective groups): each collective call
of each graph and replica group, aggregated over the profiled steps, with the slowest rank of the
group and how far it is from the group's median.

One row per (graph, call index, replica group). For each rank of the group that was profiled, its
seconds are the mean of its durations of that call over the group's profiled occurrences (one per
step and execution of the graph); the median is over those per-rank means, the slowest rank is
the one with the largest mean (the lowest rank on a tie), and the ratio is its mean over the
median. ``outlier_calls`` counts the occurrences Explorer's collective-outlier rule flags
(:func:`neurontools.profile.merge.outliers`: the slowest rank above 1.5 x that occurrence's
median)."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from neurontools.profile.merge import GroupCall, group_calls
from neurontools.profile.timeline import ExecutionLayout

RowKey = tuple[str, int, tuple[int, ...]]  # graph hash, call index, group ranks
ABBREVIATE_OVER = 16  # characters: a longer list of ranks is shortened when it is a progression


@dataclass(frozen=True)
class CollectiveGroup:
    """One collective call of one graph in one replica group, over the profiled steps."""

    kind: str
    ranks: tuple[int, ...]  # the replica group (global ranks)
    graph_hash: str
    graph_name: str
    call: int  # the call's index among the graph's collective calls
    calls: int  # profiled occurrences (steps x executions of the graph)
    steps: tuple[int, ...]
    seconds: dict[int, float]  # profiled rank -> its mean seconds per call
    outlier_calls: int

    @property
    def median(self) -> float:
        return statistics.median(self.seconds.values())

    @property
    def slowest_rank(self) -> int:
        return max(self.seconds, key=lambda r: (self.seconds[r], -r))

    @property
    def slowest_seconds(self) -> float:
        return self.seconds[self.slowest_rank]

    @property
    def ratio(self) -> float | None:
        """The slowest rank's seconds over the median; None when the median is 0."""
        median = self.median
        return self.slowest_seconds / median if median > 0 else None

    @property
    def flagged(self) -> bool:
        """Whether the outlier rule flagged at least one of its occurrences."""
        return self.outlier_calls > 0

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "replica_group": list(self.ranks),
            "graph_name": self.graph_name,
            "graph_hash": self.graph_hash,
            "call": self.call,
            "calls": self.calls,
            "steps": list(self.steps),
            "ranks_profiled": len(self.seconds),
            "median_seconds": self.median,
            "slowest_rank": self.slowest_rank,
            "slowest_seconds": self.slowest_seconds,
            "ratio_to_median": self.ratio,
            "outlier_calls": self.outlier_calls,
            "seconds_by_rank": {str(r): s for r, s in sorted(self.seconds.items())},
        }


def collective_groups(executions: Sequence[ExecutionLayout]) -> list[CollectiveGroup]:
    """Every (graph, call, replica group) of the capture, in graph, call and group order."""
    rows: dict[RowKey, list[GroupCall]] = {}
    for call in group_calls(list(executions)):
        rows.setdefault((call.graph, call.index, call.ranks), []).append(call)
    order = {lay.ref.graph: n for n, lay in reversed(list(enumerate(executions)))}  # first seen first
    keys = sorted(rows, key=lambda k: (order.get(k[0], len(order)), k[1], k[2]))
    return [_row(rows[k]) for k in keys]


def _row(calls: list[GroupCall]) -> CollectiveGroup:
    first = calls[0]
    by_rank: dict[int, list[float]] = {}
    for call in calls:
        for rank, piece in call.members:
            by_rank.setdefault(rank, []).append(piece.seconds)
    return CollectiveGroup(
        kind=first.kind,
        ranks=first.ranks,
        graph_hash=first.graph,
        graph_name=first.graph_name,
        call=first.index,
        calls=len(calls),
        steps=tuple(sorted({c.step for c in calls})),
        seconds={r: statistics.fmean(s) for r, s in sorted(by_rank.items())},
        outlier_calls=sum(1 for c in calls if c.has_outlier()),
    )


def abbreviate(numbers: Iterable[int]) -> str:
    """Ranks (or steps) for a table cell: runs of three or more as ``a-b`` (``0-7``, ``0-3,8-11``),
    and a longer list that is an arithmetic progression as ``0,8,...,248``; else every number."""
    values = sorted(set(numbers))
    if not values:
        return "-"
    parts: list[str] = []
    start = prev = values[0]
    for v in [*values[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts += [f"{start}-{prev}"] if prev - start >= 2 else [str(n) for n in range(start, prev + 1)]
        if v is not None:
            start = prev = v
    text = ",".join(parts)
    if len(text) > ABBREVIATE_OVER and len(values) > 3 and _progression(values):
        return f"{values[0]},{values[1]},...,{values[-1]}"
    return text


def _progression(values: list[int]) -> bool:
    step = values[1] - values[0]
    return all(b - a == step for a, b in itertools.pairwise(values))
