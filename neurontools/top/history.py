"""Utilization history per NeuronCore for the sparklines: the last ``HISTORY_LENGTH`` samples."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from neurontools.top.model import HISTORY_LENGTH, Sample
from neurontools.top.view import core_values

HistoryKey = tuple[int | None, int]  # (pid, or None for all applications; global core index)


class UtilizationHistory:
    """Owned by the sampling thread; ``record`` returns an immutable copy for the sample."""

    def __init__(self, length: int = HISTORY_LENGTH) -> None:
        self.length = length
        self._rings: dict[HistoryKey, deque[float]] = {}

    def record(self, sample: Sample) -> Mapping[HistoryKey, tuple[float, ...]]:
        """Append this sample's known utilizations (all applications and each one); forget vanished pids."""
        count = sample.core_count or 0
        selections: list[int | None] = [None, *(app.pid for app in sample.apps)]
        for pid in selections:
            for core, value in enumerate(core_values(sample, pid, count)):
                if value.utilization is not None:
                    self._rings.setdefault((pid, core), deque(maxlen=self.length)).append(value.utilization)
        live = set(selections)
        self._rings = {key: ring for key, ring in self._rings.items() if key[0] in live}
        return {key: tuple(ring) for key, ring in self._rings.items()}
