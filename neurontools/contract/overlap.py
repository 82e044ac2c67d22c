"""Where a graph's collectives run in its execution, and how much later they make its ops run
(docs/profiling.md §Device timeline; docs/parallel.md §Collectives and compute): the one rule the
emulator's planner and the profile reader both apply.

A collective is *issued* at its place in the op chain (``after_op``: the captured ops before it;
it starts where the first op captured after it would start) and runs on the CC-cores, one
collective at a time in call order. Its result is first needed before captured op ``wait_op``
(``None``: right away). The ops between ``after_op`` and ``wait_op`` run meanwhile, so the
collective is hidden behind them until the last of them ends (or op ``wait_op`` would start, if
later); what is left over is its *exposed* time, by which op ``wait_op`` and every op captured
after it (the chain being one dependency chain) move later. A collective waited for right away
sits in the chain: every later op moves by its seconds.

Times are seconds after the execution's start; the ops' are as the cost model scheduled them on a
healthy core (times any slow factor), before any collective.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CallSpan:
    """One collective as placed: ``start``/``end`` on the CC-core, ``exposed`` the seconds it
    delays the ops from its wait point on."""

    start: float
    end: float
    exposed: float


@dataclass(frozen=True)
class Placement:
    """The collectives of one execution of a graph, placed (:func:`place_calls`)."""

    spans: tuple[CallSpan, ...]  # in call order
    wait_points: tuple[int, ...]  # captured-op positions where some delay applies, ascending
    delays: tuple[float, ...]  # cumulative delay from each wait point on

    @property
    def exposed(self) -> float:
        """Seconds the collectives add to the execution (the sum of their exposed times)."""
        return self.delays[-1] if self.delays else 0.0

    def shift(self, op_index: int) -> float:
        """How much later captured op ``op_index`` runs than it would without collectives."""
        k = bisect.bisect_right(self.wait_points, op_index)
        return self.delays[k - 1] if k else 0.0


def place_calls(
    op_index: Sequence[int],
    op_start: Sequence[float],
    op_end: Sequence[float],
    calls: Sequence[tuple[int, int | None, float]],
) -> Placement:
    """Place ``calls`` — ``(after_op, wait_op or None, seconds)`` in call order, ``after_op`` not
    decreasing — against ops at captured positions ``op_index`` (ascending) running from
    ``op_start`` to ``op_end`` (a position past the last op is reached where they all end)."""
    done = list(itertools.accumulate(op_end, max, initial=0.0))  # done[k]: the first k ops have ended
    stop = done[-1]

    def reached(position: int) -> float:
        """When the chain reaches ``position``: the start of the first op captured at or after it."""
        k = bisect.bisect_left(op_index, position)
        return op_start[k] if k < len(op_index) else stop

    def needed(position: int, issued: int) -> float:
        """When a collective issued at ``issued`` is waited for at ``position``: the ops between
        run first (none for one waited for right away)."""
        if position == issued:
            return reached(position)
        return max(reached(position), done[bisect.bisect_left(op_index, position)])

    waits = [call[0] if call[1] is None else max(call[0], call[1]) for call in calls]
    exposed = [0.0] * len(calls)
    resolved: list[tuple[int, float]] = []  # (wait point, delay), in wait order
    total = 0.0
    pending: list[tuple[int, int]] = []  # heap of (wait point, call) issued, not yet resolved
    ends = [0.0] * len(calls)
    spans: list[CallSpan] = []
    free = 0.0

    def resolve_before(key: tuple[int, int]) -> None:
        nonlocal total
        while pending and pending[0] < key:
            w, j = heapq.heappop(pending)
            exposed[j] = max(0.0, ends[j] - (needed(w, calls[j][0]) + total))
            total += exposed[j]
            resolved.append((w, total))

    for k, (after, _, seconds) in enumerate(calls):
        resolve_before((after, k))
        start = max(reached(after) + total, free)
        free = ends[k] = start + seconds
        spans.append(CallSpan(start, ends[k], 0.0))
        heapq.heappush(pending, (waits[k], k))
    resolve_before((2**62, 0))
    return Placement(
        tuple(CallSpan(s.start, s.end, e) for s, e in zip(spans, exposed, strict=True)),
        tuple(w for w, _ in resolved),
        tuple(d for _, d in resolved),
    )
