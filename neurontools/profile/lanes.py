"""Lanes of a row (docs/profiling.md §Tracks): every output format needs the slices on one row to
nest or follow each other, so a slice that would partly overlap the ones before it moves to the
first lane of its row where it fits (a second row of the same name)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

NEST_EPSILON = 1e-12  # seconds: touching slices are not overlapping ones


def lanes_of(rows: Sequence[Any], starts: Sequence[float], ends: Sequence[float]) -> list[int]:
    """The lane of each interval ``(starts[i], ends[i])`` on row ``rows[i]`` (sortable keys): taken in order of
    row, start and longest first, each goes to the first lane where it nests in, or follows, the
    intervals already there."""
    order = sorted(range(len(rows)), key=lambda i: (rows[i], starts[i], -ends[i]))
    stacks: dict[Hashable, list[list[float]]] = {}  # row -> per lane, the ends of its open intervals
    out = [0] * len(rows)
    for i in order:
        lanes = stacks.setdefault(rows[i], [])
        start, end = starts[i], ends[i]
        lane = next((n for n, stack in enumerate(lanes) if _fits(stack, start, end)), len(lanes))
        if lane == len(lanes):
            lanes.append([])
        lanes[lane].append(end)
        out[i] = lane
    return out


def _fits(stack: list[float], start: float, end: float) -> bool:
    while stack and stack[-1] <= start + NEST_EPSILON:
        stack.pop()
    return not stack or end <= stack[-1] + NEST_EPSILON
