"""How long each collective call of a graph took in one execution (docs/profiling.md §Tracks).

The execution's own record (:class:`ExecutedCollective`: kind, bytes, ``count`` identical ones,
their seconds with faults applied) is what the daemon counted, so it comes first: each call takes
the next unused entry of its kind, payload and group size (a TP and a DP all-reduce of one
payload are different collectives). A call the record does not list takes the
header's placement (the cost model's seconds on a healthy core) times the execution's slow factor.
"""

from __future__ import annotations

from dataclasses import dataclass

from neurontools.contract.profile import (
    CollectiveCall,
    CollectivePlacement,
    DeviceProfileHeader,
    GraphSchedule,
    ProfiledExecution,
)

EXECUTED = "execution"
MODELLED = "placement"


@dataclass(frozen=True)
class CallTime:
    """One call of the graph in one execution: its index, call, placement (if any), seconds and
    where the seconds come from (:data:`EXECUTED` or :data:`MODELLED`)."""

    index: int
    call: CollectiveCall
    placement: CollectivePlacement | None
    seconds: float
    source: str


def call_times(graph: GraphSchedule, header: DeviceProfileHeader, execution: ProfiledExecution) -> list[CallTime]:
    """Every collective call of ``graph`` with its seconds in ``execution``, in call order."""
    left: dict[tuple[str, int, int], list[list[float]]] = {}
    for entry in execution.collectives:
        key = (entry.kind, entry.bytes, entry.ranks)
        left.setdefault(key, []).append([entry.seconds, entry.count])
    placements = {p.call: p for p in header.collectives}
    times = []
    for index, call in enumerate(graph.collectives):
        placement = placements.get(index)
        if placement is not None:
            entries = left.get((call.kind, call.bytes, len(placement.ranks)), [])
        else:  # no placement to tell the group: any entry of its kind and payload
            entries = [e for k, es in left.items() if k[:2] == (call.kind, call.bytes) for e in es]
        seconds, source = _take(entries), EXECUTED
        if seconds is None:
            seconds = placement.seconds * execution.slow_factor if placement is not None else 0.0
            source = MODELLED
        times.append(CallTime(index, call, placement, seconds, source))
    return times


def _take(entries: list[list[float]]) -> float | None:
    for entry in entries:
        if entry[1] > 0:
            entry[1] -= 1
            return entry[0]
    return None
