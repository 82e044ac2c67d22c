"""What the daemon snapshot adds to a report (docs/snapshot.md): engine busy shares per core,
each process's command line, owned cores and compile-cache counters.

Engine shares are the exporter's per-period core rates (``exporter.collector.core_rates``): one
formula for every consumer. They need two snapshots; before the second one they stay unknown.
"""

from __future__ import annotations

from dataclasses import replace

from neurontools.exporter.collector import core_rates
from neurontools.report.snapshot import Snapshot
from neurontools.top.model import ENGINE_NAMES, AppSample, Sample


def engine_percents(prev: Snapshot | None, cur: Snapshot) -> dict[int, dict[str, float]] | None:
    """Busy percent of every engine of every core over ``prev`` -> ``cur``; None without ``prev``."""
    if prev is None:
        return None
    return {
        core: {engine: rates.engines.get(engine, 0.0) * 100 for engine in ENGINE_NAMES}
        for core, rates in core_rates(prev, cur).items()
    }


def _with_process(app: AppSample, cur: Snapshot) -> AppSample:
    proc = cur.process(app.pid)
    if proc is None:
        return app
    return replace(
        app,
        cores=tuple(sorted(proc.neuroncores)),
        command=proc.command or None,
        compile_hits=proc.compile_cache.hits,
        compile_misses=proc.compile_cache.misses,
    )


def add_snapshot_extras(sample: Sample, prev: Snapshot | None, cur: Snapshot) -> Sample:
    return replace(
        sample,
        apps=tuple(_with_process(app, cur) for app in sample.apps),
        engines=engine_percents(prev, cur),
    )
