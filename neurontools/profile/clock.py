"""From a process's monotonic seconds to the epoch (docs/profiling.md §Files: ``trace_info.json``
reads both clocks at one instant), so processes of several hosts line up in one view."""

from __future__ import annotations

import math

from neurontools.profile.load import Capture


class Clock:
    def __init__(self, capture: Capture) -> None:
        self.offsets = {p.info.pid: p.info.clock_epoch - p.info.clock_monotonic for p in capture.processes}

    def epoch(self, pid: int, t: float) -> float:
        """Seconds since the epoch of monotonic time ``t`` in process ``pid``."""
        return t + self.offsets.get(pid, 0.0)

    def base_ns(self, earliest: float) -> int:
        """A whole second at or before ``earliest`` (epoch seconds), in ns: the base relative times
        are written from, which keeps sub-µs precision in a JSON double."""
        return math.floor(earliest) * 1_000_000_000
