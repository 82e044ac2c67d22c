"""Background collection: a thread reads one daemon snapshot every interval and publishes an
immutable ``CollectedState``; scrapes and REST calls only read the latest published state.

Per collection (daemon snapshots ``prev`` -> ``cur``, periods on the daemon's monotonic clock) the
period's figures are derived once, by ``report.period.measure(prev, cur)``; everything below reads
that ``Period``:

* **Node totals** (``Totals``) are accumulators of the period's node increases (every runtime
  process's counters and the work of processes that exited meanwhile; see ``report.period``), so
  node counters never go backwards, also across a daemon restart. Host CPU seconds are the real
  host's and only ever move forwards (a value below the last one is ignored).
* **Latency histogram**: every execution in the daemon's latency log (by sequence number) is
  observed once.
* **The last period** (``CollectedState.measured``): per-core utilization, engine shares, FLOP/s,
  per-process figures; absent until the second collection.
* **Report**: a neuron-monitor report (default groups, period = the interval) built with
  ``ReportBuilder`` and handed to the compatible metrics (``neurontools.exporter.compat``) when
  that module is installed.
* **History**: per-core and host values appended to the ring at most once per ``HISTORY_STEP``.

Daemon unreachable or malformed answer: ``source_up`` becomes False, everything else keeps its
last values, the next tick tries again. After the first success, and after every outage, the
exporter makes sure it is registered with the daemon as a tool (``neuron-ls -a`` lists it).
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from neurontools.contract.inventory import Inventory, InventoryError, inventory_from_dict
from neurontools.contract.schema import ENGINE_KEYS
from neurontools.contract.snapshot import Snapshot, SnapshotError, fetch_snapshot
from neurontools.exporter.compat_feed import CompatFeed
from neurontools.exporter.history import HISTORY_ROWS, HISTORY_STEP, History
from neurontools.exporter.totals import Accumulator, Totals
from neurontools.report import fields
from neurontools.report.builder import Report, ReportBuilder
from neurontools.report.monitor_config import every_group_config
from neurontools.report.period import Period, measure, period_between
from neurontools.sources.daemon_client import DaemonError, DaemonUnavailable
from neurontools.sources.tool_session import ToolSession

__all__ = ["Accumulator", "CollectedState", "Collector", "CompatFeed", "Totals", "history_values"]

DEFAULT_INTERVAL = 1.0
# executions are listed by end time; one can reach the daemon a little after a snapshot that it
# ended before (its report is sent as it starts): ask for this much more than strictly needed,
# the latency log's sequence numbers keep any execution from being counted twice
LATENCY_OVERLAP_S = 5.0


class SnapshotSource(Protocol):
    """What collection needs from a daemon client (``DaemonClient`` or a fake)."""

    def get(self, path: str) -> Any: ...


# -- the published state --------------------------------------------------------------------------


@dataclass(frozen=True)
class CollectedState:
    """Everything scrapes and REST calls read; replaced as a whole after each collection."""

    interval: float
    snapshot: Snapshot | None = None  # latest successful
    previous: Snapshot | None = None  # the one before it (start of the last period)
    # previous -> snapshot, derived once (report.period); its rates need a baseline: see ``rated``
    measured: Period | None = None
    totals: Totals = field(default_factory=Totals)
    report: Report | None = None
    inventory: Inventory | None = None
    source_up: bool = False
    error: str = "no collection yet"
    duration: float | None = None  # seconds taken by the last attempt
    last_success: float | None = None  # exporter wall clock of the last success
    attempts: int = 0

    @property
    def ready(self) -> bool:
        return self.source_up and self.snapshot is not None

    @property
    def rated(self) -> Period | None:
        """The last period when it has a baseline (rates, shares): from the second collection on."""
        return self.measured if self.measured is not None and self.measured.base is not None else None

    @property
    def period(self) -> float | None:
        """Seconds the last period covers (None before the second collection)."""
        return self.rated.seconds if self.rated is not None else None


def history_values(
    base: Snapshot, cur: Snapshot, period: Period | None = None
) -> dict[tuple[str, int | None], float]:
    """One history row: per-core figures over ``base`` -> ``cur``, HBM and host values at ``cur``,
    keyed by (series name, core) with the names of ``report.fields.HISTORY_PER_CORE`` and
    ``HISTORY_HOST``. ``period``: the caller's ``measure(base, cur)`` if it has one."""
    period = period_between(base, cur, period)
    values: dict[tuple[str, int | None], float] = {}
    for core, work in period.cores.items():
        values[fields.CORE_UTILIZATION.key, core] = work.utilization
        values[fields.CORE_FLOPS_PER_SECOND.key, core] = work.flops_per_second
        values[fields.CORE_HBM_USED_TOTAL.key, core] = float(sum(period.hbm.get(core, {}).values()))
        for engine, series in zip(ENGINE_KEYS, fields.ENGINE_UTILIZATIONS, strict=True):
            values[series.key, core] = work.engine_utilization(engine)
    if period.host_cpu_utilization is not None:
        values[fields.HOST_CPU_UTILIZATION.key, None] = period.host_cpu_utilization
    values[fields.HOST_MEMORY_IN_USE.key, None] = float(period.cur.host.memory.used)
    return values


class Collector:
    """Runs collection on its own thread; ``state`` is the latest published ``CollectedState``."""

    def __init__(
        self,
        client: SnapshotSource,
        interval: float = DEFAULT_INTERVAL,
        *,
        compat: CompatFeed | None = None,
        session: ToolSession | None = None,
        history: History | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.interval = interval
        self.compat = compat if compat is not None else CompatFeed(None)
        self.session = session
        self.history = history if history is not None else History(HISTORY_ROWS)
        self.history_step = max(interval, HISTORY_STEP)
        self.clock = clock
        self.wall = wall
        self.state = CollectedState(interval)
        # held while a collection publishes its state and report: a scrape that renders under it
        # sees every family from the same collection
        self.publish_lock = threading.Lock()
        self._acc = Accumulator()
        self._builder = ReportBuilder(every_group_config(interval))
        self._history_base: Snapshot | None = None
        self._check_registration = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # called on the collection thread after each collection (e.g. to render the exposition)
        self.on_collected: Callable[[], None] | None = None

    # -- thread ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="neuron-exporter-collector", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        next_tick = self.clock()
        while not self._stop.is_set():
            try:
                self.collect_once()
                if self.on_collected is not None:
                    self.on_collected()
            except Exception as exc:  # a bug must not end collection silently: say so, stay unready, retry
                print(f"neuron-exporter: collection failed: {exc!r}", file=sys.stderr, flush=True)
                self.state = replace(self.state, source_up=False, error=f"collection failed: {exc!r}")
            next_tick += self.interval
            now = self.clock()
            if next_tick <= now:  # a slow collection: skip the ticks it overran
                next_tick += math.ceil((now - next_tick) / self.interval) * self.interval
            self._stop.wait(max(next_tick - now, 0.0))

    # -- one collection -------------------------------------------------------------------------

    def _latencies_since(self, prev: Snapshot | None) -> float | None:
        """Executions the next collection needs: since the previous snapshot (with an overlap)
        and whatever the report groups still need."""
        needed = self._builder.latencies_since()
        if prev is None or needed is None:
            return None
        return min(needed, prev.monotonic - LATENCY_OVERLAP_S)

    def collect_once(self) -> CollectedState:
        started = self.clock()
        old = self.state
        try:
            cur = fetch_snapshot(self.client, self._latencies_since(old.snapshot))
        except (DaemonUnavailable, DaemonError, SnapshotError) as exc:
            self._check_registration = True
            self.state = replace(
                old, source_up=False, error=str(exc), duration=self.clock() - started, attempts=old.attempts + 1
            )
            return self.state
        prev = old.snapshot
        period = measure(prev, cur)  # the collection's figures, derived once, read by every output
        totals = self._acc.add(prev, cur, period)
        report = self._builder.update(cur, period=period)
        inventory = old.inventory if old.source_up and old.inventory is not None else self._inventory(old)
        self._record_history(period)
        if self._check_registration:
            self._register()
        state = CollectedState(
            interval=self.interval,
            snapshot=cur,
            previous=prev,
            measured=period,
            totals=totals,
            report=report,
            inventory=inventory,
            source_up=True,
            error="",
            duration=self.clock() - started,
            last_success=self.wall(),
            attempts=old.attempts + 1,
        )
        with self.publish_lock:  # the compatible families and the state change together
            self.compat.update(report)
            self.state = state
        return state

    def _inventory(self, old: CollectedState) -> Inventory | None:
        """Device details (PCI address, NUMA, links): read after each (re)connection."""
        try:
            return inventory_from_dict(self.client.get("/inventory"))
        except (DaemonUnavailable, DaemonError, InventoryError):
            return old.inventory

    def _record_history(self, period: Period) -> None:
        """A history row at most once per ``history_step``: over the collection's own period, or
        (interval shorter than the step) over the period since the last row."""
        cur, base = period.cur, self._history_base
        if base is None:
            self._history_base = cur
            return
        if cur.monotonic - base.monotonic < self.history_step - 1e-3 and cur.monotonic >= base.monotonic:
            return
        self.history.append(cur.time, history_values(base, cur, period))
        self._history_base = cur

    def _register(self) -> None:
        """Make sure the daemon lists this exporter as a tool (a restarted daemon forgot it)."""
        self._check_registration = False
        if self.session is not None and not self.session.ensure():
            self._check_registration = True
