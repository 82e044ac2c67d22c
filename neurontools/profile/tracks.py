"""The timeline's vocabulary (docs/profiling.md §Tracks): tracks, slices, counters, flows.

A :class:`TrackId` is a row of the timeline: a process (``pid``), a NeuronCore (``core``; None for
the process's host rows), a name and a lane (a second row of the same name when slices would
otherwise partly overlap: every output format needs slices on one row to nest or follow each other).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

from neurontools.contract.names import ENGINE_KEYS, ENGINES

TENSOR, VECTOR, SCALAR, GPSIMD, DMA = ENGINE_KEYS  # fails at import if the engines ever change
COMPUTE_ENGINES = (TENSOR, VECTOR, SCALAR, GPSIMD)
ENGINE_LABELS = {e.key: e.label for e in ENGINES}
DMA_QUEUE = "qSyncIO0"  # the one DMA queue an op-level profile has: the graph's own transfers
_ENGINE_OF_ROW = {**{label: key for key, label in ENGINE_LABELS.items()}, DMA_QUEUE: DMA}  # row name -> engine
CC_TRACK = "CC-core"
HBM_TRACK = "HBM"
HOST_TRACK = "host"
STEP_TRACK = "steps"

# slice kinds
OP = "op"
COLLECTIVE = "collective"
HBM_TAIL = "hbm"
HOST = "host"
SYSTEM = "system"
STEP = "step"

# counter names
HBM_IN_USE = "hbm_in_use"
TENSOR_UTILIZATION = "tensor_utilization"
UTILIZATION_BINS = 100


@dataclass(frozen=True)
class TrackId:
    pid: int
    core: int | None
    name: str
    lane: int = 0

    @property
    def key(self) -> tuple[int, int, str, int]:
        """Sort order: by process, its host rows first, then each core's."""
        return (self.pid, -1 if self.core is None else self.core, self.name, self.lane)

    @property
    def label(self) -> str:
        where = "" if self.core is None else f"NC{self.core} "
        return f"{where}{self.name}" + (f" ({self.lane + 1})" if self.lane else "")

    @property
    def engine(self) -> str | None:
        """The engine whose busy time this row counts (DMA for the DMA queue), else None."""
        return row_engine(self.name)


def row_of(engine: str) -> str:
    """The name of the row an engine's ops go on (the DMA queue for DMA)."""
    return DMA_QUEUE if engine == DMA else ENGINE_LABELS.get(engine, engine)


def row_engine(row: str) -> str | None:
    """The engine whose busy time a row of this name counts, else None."""
    return _ENGINE_OF_ROW.get(row)


@cache
def engine_track(pid: int, core: int, row: str, lane: int = 0) -> TrackId:
    """A row (:func:`row_of`) of a core (one shared object per row: a capture has millions of ops).
    Op rows are only ever these names on a core; no other slice goes on them."""
    return TrackId(pid, core, row, lane)


@dataclass(frozen=True)
class ExecRef:
    """Which execution a slice belongs to."""

    pid: int
    core: int
    graph: str  # hash
    step: int
    number: int


@dataclass(frozen=True)
class Slice:
    """A busy interval, in the host's monotonic seconds. ``duration``, when given, is its length
    as it was computed (an op's span x the slow factor, a collective's seconds, an event's
    duration): ``end - start`` of two absolute times loses about one ulp of the clock (2e-12 s at
    an uptime of 4 hours, 1e-10 s at 12 days) per slice, which matters for sums of short slices."""

    track: TrackId
    name: str
    start: float
    end: float
    kind: str
    args: dict[str, Any] = field(default_factory=dict)
    ref: ExecRef | None = None
    duration: float | None = None

    @property
    def seconds(self) -> float:
        return self.end - self.start if self.duration is None else self.duration


@dataclass(frozen=True)
class Counter:
    """A counter row: ``(time, value)`` points, each value holding until the next point."""

    track: TrackId
    unit: str
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Flow:
    """An arrow from one slice to another (a collective on one rank to the same call on the next)."""

    id: int
    source: Slice
    target: Slice
    name: str
