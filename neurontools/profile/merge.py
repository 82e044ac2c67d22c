"""Several ranks as one view (docs/profiling.md §Tracks): one collective call of one graph and one
replica group in one step is the same operation on every rank of the group, so its slices are
linked by flows (rank order, each rank to the next), and its durations across ranks are compared
(Explorer's collective-outlier rule)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from neurontools.profile.timeline import ExecutionLayout
from neurontools.profile.tracks import Flow, Slice

OUTLIER_RATIO = 1.5  # a rank whose call lasts this many times its group's median is an outlier

GroupKey = tuple[int, int, str, int, tuple[int, ...]]  # step, execution number, graph hash, call index, group ranks


@dataclass(frozen=True)
class GroupCall:
    """One collective call as each rank of its replica group ran it: ``(rank, slice)`` by rank."""

    key: GroupKey
    kind: str
    graph_name: str
    members: tuple[tuple[int, Slice], ...]

    @property
    def step(self) -> int:
        return self.key[0]

    @property
    def graph(self) -> str:
        return self.key[2]

    @property
    def index(self) -> int:
        return self.key[3]

    @property
    def ranks(self) -> tuple[int, ...]:
        return self.key[4]

    @property
    def median(self) -> float:
        return statistics.median(s.seconds for _, s in self.members)

    def slowest(self) -> tuple[int, Slice]:
        return max(self.members, key=lambda m: (m[1].seconds, -m[0]))

    def has_outlier(self) -> bool:
        """Explorer's rule: the slowest rank took more than :data:`OUTLIER_RATIO` x the median."""
        median = self.median
        return len(self.members) > 1 and median > 0 and self.slowest()[1].seconds > OUTLIER_RATIO * median


def group_calls(executions: list[ExecutionLayout]) -> list[GroupCall]:
    """Every collective call, gathered across the ranks of its replica group."""
    found: dict[GroupKey, list[tuple[int, Slice]]] = {}
    named: dict[GroupKey, tuple[str, str]] = {}  # kind, graph name
    for lay in executions:
        for time, piece in lay.calls:
            ranks = tuple(time.placement.ranks) if time.placement else ()
            rank = lay.rank if lay.rank is not None else lay.ref.core
            key = (lay.execution.step, lay.execution.number, lay.ref.graph, time.index, ranks)
            found.setdefault(key, []).append((rank, piece))
            named[key] = time.call.kind, lay.graph.name
    return [GroupCall(k, *named[k], tuple(sorted(m, key=lambda x: x[0]))) for k, m in sorted(found.items())]


def collective_flows(executions: list[ExecutionLayout]) -> list[Flow]:
    flows: list[Flow] = []
    for call in group_calls(executions):
        for (_, source), (_, target) in zip(call.members, call.members[1:], strict=False):
            flows.append(Flow(len(flows) + 1, source, target, f"{call.kind} step {call.step} call {call.index}"))
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
        if call.has_outlier():
            rank, piece = call.slowest()
            found.append(
                Outlier(call.step, call.index, call.kind, rank, piece.seconds, call.median, call.ranks, call.graph)
            )
    return found
