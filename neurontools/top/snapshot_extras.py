"""What the daemon snapshot adds to a report (docs/snapshot.md): engine busy shares per core,
each process's command line, owned cores and compile-cache counters.

Engine shares are read from the period's figures (``report.period``), the same ``Period`` the
report was built from: like every per-core figure neuron-top shows, they describe the live
processes (a process that exited is gone from the report, and from here). They need a
baseline; before the second snapshot they stay unknown. Only the engine view (key ``e``) shows
them, so they are worked out when first read, once per sample. The per-process fields go into
each ``AppSample`` as the report is mapped (``ReportReader.read``), not by copying every
application a second time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from neurontools.contract.snapshot import Snapshot
from neurontools.report.period import Period
from neurontools.top.model import ENGINE_NAMES


class EngineShares(Mapping[int, Mapping[str, float]]):
    """Busy share (0-1) of every engine of every core over a period, by the live processes, computed
    on first use."""

    def __init__(self, period: Period) -> None:
        self._period = period
        self._values: dict[int, dict[str, float]] | None = None

    def _computed(self) -> dict[int, dict[str, float]]:
        if self._values is None:
            self._values = {
                core: {engine: work.engine_utilization(engine) for engine in ENGINE_NAMES}
                for core, work in self._period.live_cores().items()
            }
        return self._values

    def __getitem__(self, core: int) -> Mapping[str, float]:
        return self._computed()[core]

    def __iter__(self) -> Iterator[int]:
        return iter(self._computed())

    def __len__(self) -> int:
        return len(self._computed())


def engine_shares(period: Period) -> Mapping[int, Mapping[str, float]] | None:
    """Busy share of every engine of every core over ``period``; None without a baseline."""
    return EngineShares(period) if period.base is not None else None


def process_fields(cur: Snapshot) -> dict[int, dict[str, Any]]:
    """Per PID, the ``AppSample`` fields only the snapshot knows."""
    fields: dict[int, dict[str, Any]] = {}
    for proc in cur.processes:
        fields.setdefault(
            proc.pid,
            {
                "cores": tuple(sorted(proc.neuroncores)),
                "command": proc.command or None,
                "compile_hits": proc.compile_cache.hits,
                "compile_misses": proc.compile_cache.misses,
            },
        )
    return fields
