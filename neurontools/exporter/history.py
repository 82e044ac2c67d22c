"""In-memory history of per-collection values for ``/api/v1/history``: one fixed-size ring per series.

A row is a timestamp (the daemon's wall clock) and one value per series, appended at most once
per ``HISTORY_STEP`` (1 s; once per collection when the interval is longer). All series share
the timestamp ring, so a point costs 8 bytes per series plus 8 bytes for the row's time.

Memory is bounded: ``HISTORY_ROWS`` (3,600) rows, i.e. one hour at the default 1 s interval
(longer with a longer interval), about 29 KB per series; a trn1.32xlarge (32 NeuronCores x 8
per-core series + 2 host series) holds about 7.5 MB whatever the load or uptime. A series that
appears later (a new core) has no value in older rows.
"""

from __future__ import annotations

import math
import threading
from array import array
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

# A series key; a TypeVar so that a mapping with narrower keys is accepted (Mapping is invariant in its keys)
_Key = TypeVar("_Key", bound=Hashable)

HISTORY_ROWS = 3600
HISTORY_STEP = 1.0  # seconds: the finest resolution kept


@dataclass(frozen=True)
class Point:
    time: float
    value: float


class History:
    """A thread-safe ring of rows ``(time, {series: value})`` with a fixed number of rows."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._times = array("d", [math.nan]) * capacity
        self._series: dict[Hashable, array[float]] = {}
        self._next = 0  # slot the next row goes to
        self._rows = 0  # rows held (<= capacity)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._rows

    def append(self, time: float, values: Mapping[_Key, float]) -> None:
        """Add one row; series not in ``values`` get no value in it."""
        with self._lock:
            slot = self._next
            self._times[slot] = time
            for key, column in self._series.items():
                if key not in values:
                    column[slot] = math.nan
            for key, value in values.items():
                series = self._series.get(key)
                if series is None:
                    series = self._series[key] = array("d", [math.nan]) * self.capacity
                series[slot] = value
            self._next = (slot + 1) % self.capacity
            self._rows = min(self._rows + 1, self.capacity)

    def points(self, key: Hashable, since: float = -math.inf) -> list[Point]:
        """Values of one series at times >= ``since``, oldest first; rows without a value are skipped."""
        with self._lock:
            column = self._series.get(key)
            if column is None:
                return []
            first = (self._next - self._rows) % self.capacity
            out = []
            for i in range(self._rows):
                slot = (first + i) % self.capacity
                t, v = self._times[slot], column[slot]
                if t >= since and not math.isnan(v):
                    out.append(Point(t, v))
            return out

    def memory_bytes(self) -> int:
        """Bytes held by the rings (timestamps and every series)."""
        with self._lock:
            return 8 * self.capacity * (1 + len(self._series))
