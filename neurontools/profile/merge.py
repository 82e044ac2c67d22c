"""Several ranks as one view (docs/profiling.md §Tracks): one collective call of one replica group
in one step is the same operation on every rank of the group, so its slices are linked by flows
(rank order, each rank to the next), and its durations across ranks are compared (Explorer's
collective-outlier rule)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from neurontools.profile.timeline import ExecutionLayout
from neurontools.profile.tracks import Flow, Slice

OUTLIER_RATIO = 1.5  # a rank whose call lasts this many times its group's median is an outlier

GroupKey = tuple[int, int, int, tuple[int, ...]]  # step, execution number, call index, group ranks


@dataclass(frozen=True)
class GroupCall:
    """One collective call as each rank of its replica group ran it: ``(rank, slice)`` by rank."""

    key: GroupKey
    kind: str
    members: tuple[tuple[int, Slice], ...]

    @property
    def median(self) -> float:
        return statistics.median(s.seconds for _, s in self.members)

    def slowest(self) -> tuple[int, Slice]:
        return max(self.members, key=lambda m: (m[1].seconds, -m[0]))


def group_calls(executions: list[ExecutionLayout]) -> list[GroupCall]:
    """Every collective call, gathered across the ranks of its replica group."""
    found: dict[GroupKey, list[tuple[int, Slice]]] = {}
    kinds: dict[GroupKey, str] = {}
    for lay in executions:
        for time, piece in lay.calls:
            ranks = tuple(time.placement.ranks) if time.placement else ()
            rank = lay.rank if lay.rank is not None else lay.ref.core
            key = (lay.execution.step, lay.execution.number, time.index, ranks)
            found.setdefault(key, []).append((rank, piece))
            kinds[key] = time.call.kind
    return [GroupCall(k, kinds[k], tuple(sorted(m, key=lambda x: x[0]))) for k, m in sorted(found.items())]


def collective_flows(executions: list[ExecutionLayout]) -> list[Flow]:
    flows: list[Flow] = []
    for call in group_calls(executions):
        for (_, source), (_, target) in zip(call.members, call.members[1:], strict=False):
            flows.append(Flow(len(flows) + 1, source, target, f"{call.kind} step {call.key[0]} call {call.key[2]}"))
    return flows


@dataclass(frozen=True)
class Outlier:
    """A rank whose call took more than :data:`OUTLIER_RATIO` times its group's median."""

    step: int
    call: int
    kind: str
    rank: int
    seconds: float
    median: float
    ranks: tuple[int, ...]
    graph: str  # the slow rank's graph (hash)


def outliers(executions: list[ExecutionLayout]) -> list[Outlier]:
    """The slowest rank of each group call whose duration is far above the group's median."""
    found = []
    for call in group_calls(executions):
        if len(call.members) < 2:
            continue
        rank, piece = call.slowest()
        median = call.median
        if median > 0 and piece.seconds > OUTLIER_RATIO * median:
            graph = piece.ref.graph if piece.ref else ""
            found.append(Outlier(call.key[0], call.key[2], call.kind, rank, piece.seconds, median, call.key[3], graph))
    return found
