"""Utilization history per NeuronCore for the sparklines: the last ``HISTORY_LENGTH`` samples.

A sample without a value for a core (the source unreachable, a group not collected yet) is kept as
``None``, a gap, so the sparkline's time axis stays true across an outage.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from neurontools.top.model import HISTORY_LENGTH, Sample
from neurontools.top.view import core_values

HistoryKey = tuple[int | None, int]  # (pid, or None for all applications; global core index)
History = Mapping[HistoryKey, tuple[float | None, ...]]


class UtilizationHistory:
    """Owned by the sampling thread; ``record`` returns an immutable copy for the sample."""

    def __init__(self, length: int = HISTORY_LENGTH) -> None:
        self.length = length
        self._rings: dict[HistoryKey, deque[float | None]] = {}

    def record(self, sample: Sample) -> History:
        """Append this sample's utilizations (all applications and each one; unknown ones as gaps);
        forget vanished pids."""
        count = sample.core_count or 0
        selections: list[int | None] = [None, *(app.pid for app in sample.apps)]
        for pid in selections:
            for core, value in enumerate(core_values(sample, pid, count)):
                ring = self._rings.get((pid, core))
                if ring is None:
                    if value.utilization is None:  # nothing known yet: no history to start
                        continue
                    ring = self._rings[(pid, core)] = deque(maxlen=self.length)
                ring.append(value.utilization)
        live = set(selections)
        self._rings = {key: ring for key, ring in self._rings.items() if key[0] in live}
        return self.snapshot()

    def record_gap(self) -> History:
        """No sample this time (the source is unreachable): every history gets a gap."""
        for ring in self._rings.values():
            ring.append(None)
        return self.snapshot()

    def snapshot(self) -> History:
        return {key: tuple(ring) for key, ring in self._rings.items()}
