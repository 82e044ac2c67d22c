"""What the daemon snapshot adds to a report (docs/snapshot.md): engine busy shares per core,
each process's command line, owned cores and compile-cache counters.

Engine shares are the exporter's per-period core rates (``exporter.collector.core_rates``): one
formula for every consumer. They need two snapshots; before the second one they stay unknown.
Only the engine view (key ``e``) shows them, so they are worked out when first read, once per
sample. The per-process fields go into each ``AppSample`` as the report is mapped
(``ReportReader.read``), not by copying every application a second time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from neurontools.exporter.collector import core_rates
from neurontools.report.snapshot import Snapshot
from neurontools.top.model import ENGINE_NAMES, Sample


class EnginePercents(Mapping[int, Mapping[str, float]]):
    """Busy percent of every engine of every core over ``prev`` -> ``cur``, computed on first use."""

    def __init__(self, prev: Snapshot, cur: Snapshot) -> None:
        self._snapshots = (prev, cur)
        self._values: dict[int, dict[str, float]] | None = None

    def _computed(self) -> dict[int, dict[str, float]]:
        if self._values is None:
            self._values = {
                core: {engine: rates.engines.get(engine, 0.0) * 100 for engine in ENGINE_NAMES}
                for core, rates in core_rates(*self._snapshots).items()
            }
        return self._values

    def __getitem__(self, core: int) -> Mapping[str, float]:
        return self._computed()[core]

    def __iter__(self) -> Iterator[int]:
        return iter(self._computed())

    def __len__(self) -> int:
        return len(self._computed())


def engine_percents(prev: Snapshot | None, cur: Snapshot) -> Mapping[int, Mapping[str, float]] | None:
    """Busy percent of every engine of every core over ``prev`` -> ``cur``; None without ``prev``."""
    return EnginePercents(prev, cur) if prev is not None else None


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


def add_snapshot_extras(sample: Sample, prev: Snapshot | None, cur: Snapshot) -> Sample:
    """``sample`` with what only the snapshots know (for a sample mapped without ``process_fields``)."""
    fields = process_fields(cur)
    return replace(
        sample,
        apps=tuple(replace(app, **fields[app.pid]) if app.pid in fields else app for app in sample.apps),
        engines=engine_percents(prev, cur),
    )
