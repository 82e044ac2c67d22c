"""Peak device memory (HBM) per NeuronCore of this process, as the daemon's ledger reports it.

Reads ``GET /v1/processes/<pid>/memory`` after each step and keeps the largest value seen per core: the
runtime's own peak when a core's entry under ``memory.cores.<core id>`` has a ``peak`` key (the
ledger's high-water mark, inside steps too), else the sum of its categories (then the peak is
the largest use seen at step ends). When the answer has no ``memory`` key, or the daemon refuses
the read, there is nothing to report: :meth:`peak` is ``None``. While no daemon answers (or a
restarted one does not know this process yet) samples are skipped, not given up.
"""

from __future__ import annotations

import os
from typing import Any

from neurontools.sources.daemon_client import DaemonClient, DaemonError, DaemonUnavailable


def _total(value: Any) -> int:
    """Sum of the numeric leaves of one core's memory breakdown."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, dict):
        return sum(_total(v) for v in value.values())
    return 0


def core_totals(process: Any) -> dict[int, int] | None:
    """``{core id: bytes}`` from a ``/processes/<pid>`` answer; ``None`` when it has no memory data."""
    if not isinstance(process, dict):
        return None
    memory = process.get("memory")
    if not isinstance(memory, dict) or not isinstance(memory.get("cores"), dict):
        return None
    totals: dict[int, int] = {}
    for core, breakdown in memory["cores"].items():
        if not str(core).isdigit():
            continue
        if isinstance(breakdown, dict) and isinstance(breakdown.get("peak"), int | float):
            totals[int(core)] = int(breakdown["peak"])
        else:
            totals[int(core)] = _total(breakdown)
    return totals


class HbmPeak:
    def __init__(self, client: DaemonClient | None, pid: int | None = None) -> None:
        self.client = client
        self.pid = os.getpid() if pid is None else pid
        self._peak: dict[int, int] = {}
        self._available = client is not None
        self.reason = "" if client is not None else "no emulated device attached"

    def sample(self) -> None:
        if not self._available or self.client is None:
            return
        try:
            totals = core_totals({"memory": self.client.get(f"/processes/{self.pid}/memory")})
        except DaemonUnavailable:  # no daemon for now: the process registers again with the next
            return  # one (docs/lifecycle.md), sampling goes on then
        except DaemonError as exc:
            if exc.status == 404:  # a restarted daemon this process has not registered with yet
                return
            self._available, self.reason = False, f"daemon not readable: {exc}"
            return
        if totals is None:
            self._available, self.reason = False, "the daemon does not report per-process memory"
            return
        for core, used in totals.items():
            self._peak[core] = max(self._peak.get(core, 0), used)

    def peak(self) -> dict[int, int] | None:
        return dict(sorted(self._peak.items())) if self._available and self._peak else None
