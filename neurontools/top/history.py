"""Utilization history per NeuronCore for the sparklines: the last ``HISTORY_LENGTH`` samples.

A sample without a value for a core (the source unreachable, a group not collected yet, a core
the sample does not have) is kept as ``None``, a gap, so the sparkline's time axis stays true
across an outage. A core's history starts with its first known value; a process that leaves
takes its histories with it.

Kept as one frame per sample (the utilization of every core for "all" and for each process),
shared by every sample that shows it: recording costs one pass over the processes, and a
history is put together only when the screen draws it (the sparklines of the selected tab).
Copying every (process, core) history each second would cost far more on a 32-process job.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping

from neurontools.top.model import HISTORY_LENGTH, Sample
from neurontools.top.view import core_utilizations

HistoryKey = tuple[int | None, int]  # (pid, or None for all applications; global core index)
History = Mapping[HistoryKey, tuple[float | None, ...]]
Frame = Mapping[int | None, tuple[float | None, ...]] | None  # utilization per selection and core; None: a gap


class HistoryView(Mapping[HistoryKey, tuple[float | None, ...]]):
    """The histories as they were when recorded (immutable): ``frames`` are the last samples',
    numbered from ``first``; ``starts`` holds, per selection, the frame number at which each
    core's history began (None: not begun)."""

    def __init__(
        self, frames: tuple[Frame, ...], first: int, starts: Mapping[int | None, tuple[int | None, ...]]
    ) -> None:
        self._frames = frames
        self._first = first
        self._starts = starts

    def __getitem__(self, key: HistoryKey) -> tuple[float | None, ...]:
        pid, core = key
        starts = self._starts.get(pid)
        start = starts[core] if starts is not None and 0 <= core < len(starts) else None
        if start is None:
            raise KeyError(key)
        values: list[float | None] = []
        for frame in self._frames[max(start - self._first, 0) :]:
            row = frame.get(pid) if frame is not None else None
            values.append(row[core] if row is not None and core < len(row) else None)
        return tuple(values)

    def __iter__(self) -> Iterator[HistoryKey]:
        for pid, starts in self._starts.items():
            for core, start in enumerate(starts):
                if start is not None:
                    yield (pid, core)

    def __len__(self) -> int:
        return sum(start is not None for starts in self._starts.values() for start in starts)


class UtilizationHistory:
    """Owned by the sampling thread; ``record`` returns an immutable view for the sample."""

    def __init__(self, length: int = HISTORY_LENGTH) -> None:
        self.length = length
        self._frames: deque[Frame] = deque(maxlen=length)
        self._recorded = 0  # frames recorded so far (the next one's number)
        self._starts: dict[int | None, tuple[int | None, ...]] = {}

    def record(self, sample: Sample) -> History:
        """Append this sample's utilizations (all applications and each one; unknown ones as gaps);
        forget vanished pids."""
        count = sample.core_count or 0
        selections: list[int | None] = [None, *(app.pid for app in sample.apps)]
        frame: dict[int | None, tuple[float | None, ...]] = {}
        starts: dict[int | None, tuple[int | None, ...]] = {}
        for pid in selections:
            values = tuple(core_utilizations(sample, pid, count)[0])
            frame[pid] = values
            begun = self._starts.get(pid, ())
            if len(begun) >= count and None not in begun[:count]:  # every core's history has begun
                starts[pid] = begun
                continue
            starts[pid] = tuple(
                self._recorded if start is None and core < count and values[core] is not None else start
                for core, start in enumerate(begun + (None,) * (count - len(begun)))
            )
        self._frames.append(frame)
        self._recorded += 1
        self._starts = starts
        return self.snapshot()

    def record_gap(self) -> History:
        """No sample this time (the source is unreachable): every history gets a gap."""
        self._frames.append(None)
        self._recorded += 1
        return self.snapshot()

    def snapshot(self) -> History:
        return HistoryView(tuple(self._frames), self._recorded - len(self._frames), dict(self._starts))
