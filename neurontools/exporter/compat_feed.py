"""neuron-monitor-prometheus's metric families inside neuron-exporter, when the optional module
``neurontools.exporter.compat`` is installed: fed with the reports the collection builds."""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client.metrics_core import Metric

from neurontools.report.builder import Report

COMPAT_MODULE = "neurontools.exporter.compat"


class CompatFeed:
    """The official script's metric families, fed with reports, when ``compat`` is installed.

    A prometheus_client collector itself: register it next to the extended collector. ``update``
    (collection thread) and ``collect`` (scrape) are serialized by a lock held only for in-memory
    work. A failing compat module never breaks a scrape: its families are left out, once logged.
    """

    def __init__(self, metrics: Any | None) -> None:
        self.metrics = metrics
        self._lock = threading.Lock()
        self._failed = False

    @classmethod
    def load(cls) -> CompatFeed:
        try:
            module = importlib.import_module(COMPAT_MODULE)
        except ModuleNotFoundError as exc:
            if exc.name != COMPAT_MODULE:
                raise
            return cls(None)
        return cls(module.CompatMetrics())

    @property
    def enabled(self) -> bool:
        return self.metrics is not None

    def update(self, report: Report) -> None:
        if self.metrics is None:
            return
        with self._lock:
            try:
                self.metrics.update(report)
            except Exception as exc:  # one bad report must not stop collection
                self._log(f"compatible metrics: cannot apply a report: {exc!r}")

    def collect(self) -> Iterator[Metric]:
        if self.metrics is None:
            return iter(())
        with self._lock:
            try:
                families = list(self.metrics.collect())
            except Exception as exc:
                self._log(f"compatible metrics left out of the scrape: {exc!r}")
                families = []
        return iter(families)

    def _log(self, message: str) -> None:
        if not self._failed:
            self._failed = True
            print(f"neuron-exporter: {message}", file=sys.stderr, flush=True)


