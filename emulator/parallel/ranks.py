"""The rank grid of a parallel job: which rank holds which coordinates, groups and NeuronCore.

A job of ``tp * dp * pp`` ranks is a grid of three axes — tensor-parallel (``tp``), data-parallel
(``dp``) and pipeline-parallel (``pp``). An *order* such as ``"tp-dp-pp"`` names the axes from the
fastest-varying to the slowest (Megatron-LM's rank-generator idea): under it a rank is
``pp_rank * dp * tp + dp_rank * tp + tp_rank``, which is also neuronx-distributed's default
``[PP, DP, TP]`` grid read row-major. It is the layout of both the model-scale jobs
(``emulator.parallel.plan``) and a user's neuronx-distributed script
(``emulator.compat.nxd_state``), and the one both read their groups from (docs/parallel.md).

A *group token* names the axes that vary inside a group: ``"tp"`` (the ranks of one
tensor-parallel group), ``"dp"``, ``"pp"``, or several joined, e.g. ``"tp-pp"`` (the
model-parallel group: every rank holding a different part of the same replica). Ranks are
numbered node by node, ``ranks_per_node`` to a node, and rank ``r`` of a node runs on its
NeuronCore ``r``: :meth:`RankGrid.place` answers a rank's node, core and coordinates, which is
what the cost model needs to find a group's links (``emulator/costmodel/topology.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

AXES = ("tp", "dp", "pp")
DEFAULT_ORDER = "tp-dp-pp"  # TP fastest, then DP, then PP


@dataclass(frozen=True)
class RankPlace:
    """Where a rank sits: its node, the NeuronCore on that node, its index in each axis."""

    rank: int
    node: int
    core: int  # NeuronCore on its node
    tp_rank: int
    pp_rank: int
    dp_rank: int


@dataclass(frozen=True)
class RankGrid:
    """The ``tp x dp x pp`` ranks of a job laid out in ``order`` (fastest axis first)."""

    tp: int = 1
    dp: int = 1
    pp: int = 1
    order: str = DEFAULT_ORDER
    ranks_per_node: int = 0  # 0: every rank on one node

    def __post_init__(self) -> None:
        for axis in AXES:
            if self.size(axis) < 1:
                raise ValueError(f"parallel size {axis}={self.size(axis)}: expected a positive integer")
        if sorted(self.axes) != sorted(AXES):
            raise ValueError(f"rank order {self.order!r}: expected the axes {', '.join(AXES)} joined by '-'")
        if self.ranks_per_node and self.world % self.ranks_per_node:
            raise ValueError(f"{self.world} ranks do not fill nodes of {self.ranks_per_node}")

    @classmethod
    def for_world(cls, world: int, *, tp: int = 1, pp: int = 1, ranks_per_node: int = 0) -> RankGrid:
        """The grid of ``world`` ranks with the given TP and PP sizes (DP fills the rest)."""
        if tp < 1 or pp < 1:
            raise ValueError(f"tensor and pipeline parallel sizes must be at least 1 (got {tp} and {pp})")
        if world % (tp * pp):
            raise ValueError(
                f"world size {world} is not divisible by tensor parallel size {tp} x pipeline parallel size {pp}"
            )
        return cls(tp=tp, dp=world // (tp * pp), pp=pp, ranks_per_node=ranks_per_node)

    @property
    def axes(self) -> tuple[str, ...]:
        return tuple(self.order.split("-"))

    @property
    def world(self) -> int:
        return self.tp * self.dp * self.pp

    def size(self, axis: str) -> int:
        """The size of one axis (``tp``, ``dp`` or ``pp``)."""
        if axis not in AXES:
            raise ValueError(f"unknown parallel group {axis!r} (tp, dp or pp)")
        return int(getattr(self, axis))

    def _stride(self, axis: str) -> int:
        stride = 1
        for faster in self.axes[: self.axes.index(axis)]:
            stride *= self.size(faster)
        return stride

    def coords(self, rank: int) -> dict[str, int]:
        """Rank -> its index along each axis."""
        if not 0 <= rank < self.world:
            raise ValueError(f"rank {rank} is not in the job ({self.world} ranks)")
        return {axis: (rank // self._stride(axis)) % self.size(axis) for axis in AXES}

    def rank_of(self, *, tp: int = 0, dp: int = 0, pp: int = 0) -> int:
        """Coordinates -> rank."""
        return tp * self._stride("tp") + dp * self._stride("dp") + pp * self._stride("pp")

    def groups(self, token: str) -> list[list[int]]:
        """Every group of ``token`` (axes joined by ``-``): ranks that differ only along those
        axes, each group in rank order, the groups in the order of their first rank."""
        fixed = self._fixed_axes(token)
        members: dict[tuple[int, ...], list[int]] = {}
        for rank in range(self.world):
            c = self.coords(rank)
            members.setdefault(tuple(c[a] for a in fixed), []).append(rank)
        return sorted(members.values(), key=lambda g: g[0])

    def group_of(self, token: str, rank: int) -> list[int]:
        """The ranks of ``rank``'s group of ``token``."""
        fixed = self._fixed_axes(token)
        mine = self.coords(rank)
        return [r for r in range(self.world) if all(self.coords(r)[a] == mine[a] for a in fixed)]

    def concurrent_groups(self, token: str, rank: int) -> list[list[int]]:
        """The groups of ``token`` that run their collectives at the same time as ``rank``'s: those
        of its pipeline stage (stages run at different times). The cost model shares the links
        among them (docs/collectives.md)."""
        stage = self.coords(rank)["pp"]
        return [g for g in self.groups(token) if self.coords(g[0])["pp"] == stage]

    def _fixed_axes(self, token: str) -> list[str]:
        """The axes a group of ``token`` keeps fixed (a ValueError for an unknown axis)."""
        varying = token.split("-")
        for axis in varying:
            self.size(axis)
        return [a for a in AXES if a not in varying]

    def node_of(self, rank: int) -> int:
        return rank // self.ranks_per_node if self.ranks_per_node else 0

    def place(self, rank: int) -> RankPlace:
        """A rank's node, NeuronCore on that node and coordinates."""
        c = self.coords(rank)
        core = rank % self.ranks_per_node if self.ranks_per_node else rank
        return RankPlace(rank, self.node_of(rank), core, c["tp"], c["pp"], c["dp"])

    def placements(self) -> list[RankPlace]:
        return [self.place(r) for r in range(self.world)]

    def state(self, rank: int, *, sequence_parallel: bool = False) -> ParallelState:
        """``rank``'s view of the grid."""
        self.coords(rank)
        return ParallelState(self, rank, sequence_parallel)

    def state_at(self, *, tp: int = 0, dp: int = 0, pp: int = 0, sequence_parallel: bool = False) -> ParallelState:
        """The view of the rank at these coordinates."""
        return self.state(self.rank_of(tp=tp, dp=dp, pp=pp), sequence_parallel=sequence_parallel)


@dataclass(frozen=True)
class ParallelState:
    """One rank's view of the grid: group sizes and its index in each (Megatron's parallel_state)."""

    grid: RankGrid = RankGrid()
    rank: int = 0
    sequence_parallel: bool = False

    @property
    def tp(self) -> int:
        return self.grid.tp

    @property
    def dp(self) -> int:
        return self.grid.dp

    @property
    def pp(self) -> int:
        return self.grid.pp

    @property
    def tp_rank(self) -> int:
        return self.grid.coords(self.rank)["tp"]

    @property
    def dp_rank(self) -> int:
        return self.grid.coords(self.rank)["dp"]

    @property
    def pp_rank(self) -> int:
        return self.grid.coords(self.rank)["pp"]

    def size(self, group: str) -> int:
        return self.grid.size(group)

    def group(self, token: str) -> list[int]:
        """The global ranks of this rank's group of ``token``."""
        return self.grid.group_of(token, self.rank)

    @property
    def first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def last_stage(self) -> bool:
        return self.pp_rank == self.pp - 1
