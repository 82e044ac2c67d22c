"""Background collection: a thread reads one daemon snapshot every interval and publishes an
immutable ``CollectedState``; scrapes and REST calls only read the latest published state.

Per collection (daemon snapshots ``prev`` -> ``cur``, periods on the daemon's monotonic clock):

* **Node totals** (``Totals``) are accumulators: each runtime process's counter increase since the
  previous snapshot is added (a process missing from ``prev`` attached after it and counts from
  zero; a counter that went backwards restarted, like a Prometheus counter reset). A process that
  exits keeps what it added, so node counters never go backwards. Host CPU seconds are the real
  host's and only ever move forwards (a value below the last one is ignored).
* **Latency histogram**: every execution in a process's ``latencies`` with an end time after the
  last one seen for that process is observed once.
* **Rates** (``CoreRates``) cover the last collection period: busy ratio of each core and engine,
  FLOP/s; absent until the second collection.
* **Report**: a neuron-monitor report (default groups, period = the interval) built with
  ``ReportBuilder`` and handed to the compatible metrics (``neurontools.exporter.compat``) when
  that module is installed.
* **History**: per-core and host values appended to the ring at most once per ``HISTORY_STEP``.

Daemon unreachable or malformed answer: ``source_up`` becomes False, everything else keeps its
last values, the next tick tries again. After the first success, and after every outage, the
exporter makes sure it is registered with the daemon as a tool (``neuron-ls -a`` lists it).
"""

from __future__ import annotations

import importlib
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from prometheus_client.metrics_core import Metric

from neurontools.exporter.fields import ENGINE_LABEL_VALUES, HBM_CATEGORIES, LATENCY_BUCKETS
from neurontools.exporter.history import HISTORY_ROWS, HISTORY_STEP, History
from neurontools.inventory import Inventory, InventoryError, inventory_from_dict
from neurontools.monitor.config import MetricGroup, MonitorConfig, RuntimeSelector
from neurontools.report.builder import Report, ReportBuilder
from neurontools.report.groups import counter_delta
from neurontools.report.schema import (
    DEFAULT_APP_GROUPS,
    DEFAULT_SYSTEM_GROUPS,
    ERROR_SUMMARY_KEYS,
    EXECUTION_SUMMARY_KEYS,
    HW_COUNTER_KEYS,
    VCPU_FIELDS,
)
from neurontools.report.snapshot import ProcessSnapshot, Snapshot, SnapshotError, fetch_snapshot
from neurontools.sources.daemon_client import DaemonError, DaemonUnavailable
from neurontools.sources.tool_session import ToolSession

LINK_TYPES = ("neuronlink", "efa")
DEFAULT_INTERVAL = 1.0
MIN_INTERVAL = 0.1
MAX_INTERVAL = 3600.0
# executions are listed by end time; one can reach the daemon a little after a snapshot that it
# ended before (its report is sent as it starts): ask for this much more than strictly needed,
# the latency log's sequence numbers keep any execution from being counted twice
LATENCY_OVERLAP_S = 5.0
COMPAT_MODULE = "neurontools.exporter.compat"


class SnapshotSource(Protocol):
    """What collection needs from a daemon client (``DaemonClient`` or a fake)."""

    def get(self, path: str) -> Any: ...


def monitor_config(period: float) -> MonitorConfig:
    """neuron-monitor's default configuration (docs/reference/neuron-monitor.md §Command line)
    with every period set to ``period``, plus ``neuron_hw_counters`` so the compatible
    ``hardware_ecc_events_total`` has its data."""
    app = tuple(MetricGroup(t, period, 0) for t in DEFAULT_APP_GROUPS)
    system = (*DEFAULT_SYSTEM_GROUPS, "neuron_hw_counters")
    return MonitorConfig(
        period=period,
        neuron_runtimes=(RuntimeSelector(tag_filter=".*", period=period, metrics=app),),
        system_metrics=tuple(MetricGroup(t, period) for t in dict.fromkeys(system)),
    )


def core_count(snap: Snapshot) -> int:
    return snap.hardware.neuron_device_count * snap.hardware.neuroncore_per_device_count


def device_of(snap: Snapshot, core: int) -> int:
    return core // max(snap.hardware.neuroncore_per_device_count, 1)


# -- per-period arithmetic ------------------------------------------------------------------------


@dataclass(frozen=True)
class CoreDelta:
    """Increase of one NeuronCore's counters over a period, summed over the processes using it."""

    busy: float = 0.0
    flops: int = 0
    engines: Mapping[str, float] = field(default_factory=dict)


def _before(prev: Snapshot | None, proc: ProcessSnapshot) -> ProcessSnapshot | None:
    if prev is None:
        return None
    before = prev.process(proc.pid)
    return before if before is not None and before.is_runtime else None


def counter_sources(
    prev: Snapshot | None, cur: Snapshot
) -> tuple[list[tuple[ProcessSnapshot, ProcessSnapshot | None]], list[ProcessSnapshot]]:
    """What node counters grow by between two snapshots: ``(now, before)`` pairs of the live
    processes and of the daemon's ``retired`` totals, and the processes that exited in between,
    whose earlier counters must be taken off again (their final ones moved into ``retired``)."""
    pairs: list[tuple[ProcessSnapshot, ProcessSnapshot | None]] = [(p, _before(prev, p)) for p in cur.runtime_processes]
    exited: list[ProcessSnapshot] = []
    if cur.retired is not None:
        pairs.append((cur.retired, prev.retired if prev is not None else None))
        live = {p.pid for p in cur.runtime_processes}
        exited = [p for p in prev.runtime_processes if p.pid not in live] if prev is not None else []
    return pairs, exited


def core_deltas(prev: Snapshot | None, cur: Snapshot) -> dict[int, CoreDelta]:
    """Per-core counter increases from ``prev`` to ``cur``, counting processes that exited in between."""
    busy: dict[int, float] = {}
    flops: dict[int, int] = {}
    engines: dict[int, dict[str, float]] = {}
    pairs, exited = counter_sources(prev, cur)
    for proc, before in pairs:
        for core, now in proc.cores.items():
            old = before.cores.get(core) if before is not None else None
            busy[core] = busy.get(core, 0.0) + counter_delta(now.busy, old.busy if old else None)
            flops[core] = flops.get(core, 0) + int(counter_delta(now.flops, old.flops if old else None))
            per_engine = engines.setdefault(core, {})
            for name, value in now.engines.items():
                prior = old.engines.get(name) if old is not None else None
                per_engine[name] = per_engine.get(name, 0.0) + counter_delta(value, prior)
    for proc in exited:
        for core, old in proc.cores.items():
            busy[core] = max(0.0, busy.get(core, 0.0) - old.busy)
            flops[core] = max(0, flops.get(core, 0) - old.flops)
            per_engine = engines.setdefault(core, {})
            for name, value in old.engines.items():
                per_engine[name] = max(0.0, per_engine.get(name, 0.0) - value)
    return {core: CoreDelta(busy[core], flops[core], engines.get(core, {})) for core in busy}


@dataclass(frozen=True)
class CoreRates:
    """One NeuronCore over one period: busy ratios (0-1) and FLOP/s."""

    utilization: float
    engines: Mapping[str, float]
    flops_per_second: float


def _ratio(value: float, seconds: float) -> float:
    return min(max(value / seconds, 0.0), 1.0) if seconds > 0 else 0.0


def core_rates(prev: Snapshot, cur: Snapshot) -> dict[int, CoreRates]:
    """Rates of every core of the instance over ``prev`` -> ``cur`` (idle cores at zero)."""
    seconds = max(cur.monotonic - prev.monotonic, 0.0)
    deltas = core_deltas(prev, cur)
    rates = {}
    for core in range(core_count(cur)):
        d = deltas.get(core, CoreDelta())
        rates[core] = CoreRates(
            utilization=_ratio(d.busy, seconds),
            engines={e: _ratio(d.engines.get(e, 0.0), seconds) for e in ENGINE_LABEL_VALUES},
            flops_per_second=d.flops / seconds if seconds > 0 else 0.0,
        )
    return rates


def hbm_by_core(snap: Snapshot) -> dict[int, dict[str, int]]:
    """Device memory held on each core, by category, summed over the runtime processes."""
    out: dict[int, dict[str, int]] = {}
    for proc in snap.runtime_processes:
        for core, usage in proc.memory.cores.items():
            per = out.setdefault(core, dict.fromkeys(HBM_CATEGORIES, 0))
            for cat in HBM_CATEGORIES:
                per[cat] += getattr(usage, cat)
    return out


def owners(snap: Snapshot) -> dict[int, ProcessSnapshot]:
    """The runtime process owning each core."""
    return {core: proc for proc in snap.runtime_processes for core in proc.neuroncores}


# -- node accumulators ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Totals:
    """Node-level counters as published to scrapes (never go backwards)."""

    busy: Mapping[int, float] = field(default_factory=dict)  # core -> seconds
    engines: Mapping[tuple[int, str], float] = field(default_factory=dict)  # (core, engine) -> seconds
    flops: Mapping[int, int] = field(default_factory=dict)
    executions: Mapping[str, int] = field(default_factory=lambda: dict.fromkeys(EXECUTION_SUMMARY_KEYS, 0))
    errors: Mapping[str, int] = field(default_factory=lambda: dict.fromkeys(ERROR_SUMMARY_KEYS, 0))
    compile_hits: int = 0
    compile_misses: int = 0
    collective_bytes: Mapping[str, int] = field(default_factory=lambda: dict.fromkeys(LINK_TYPES, 0))
    collective_operations: Mapping[str, int] = field(default_factory=lambda: dict.fromkeys(LINK_TYPES, 0))
    ecc: Mapping[tuple[int, str], int] = field(default_factory=dict)  # (device, event type) -> count
    host_cpu: Mapping[str, float] = field(default_factory=dict)  # mode -> seconds, all vCPUs
    latency_buckets: tuple[int, ...] = (0,) * (len(LATENCY_BUCKETS) + 1)  # per bucket, last is +Inf
    latency_sum: float = 0.0

    @property
    def latency_count(self) -> int:
        return sum(self.latency_buckets)


def _inc(now: object, old: object | None, key: str) -> int:
    """Increase of counter ``key`` between two counter objects (``old`` None: counted from zero)."""
    return int(counter_delta(getattr(now, key), getattr(old, key) if old is not None else None))


def _bucket(value: float) -> int:
    for i, bound in enumerate(LATENCY_BUCKETS):
        if value <= bound:
            return i
    return len(LATENCY_BUCKETS)


class Accumulator:
    """Adds each collection's increases into node totals (owned by the collection thread)."""

    def __init__(self) -> None:
        self._t = Totals()
        self._last_end: dict[int, float] = {}  # pid -> end time of the last latency observed
        self._last_seq = 0  # sequence number of the last execution observed in the latency log

    @property
    def totals(self) -> Totals:
        return self._t

    def add(self, prev: Snapshot | None, cur: Snapshot) -> Totals:
        t = self._t
        busy, flops, engines = dict(t.busy), dict(t.flops), dict(t.engines)
        for core, d in core_deltas(prev, cur).items():
            busy[core] = busy.get(core, 0.0) + d.busy
            flops[core] = flops.get(core, 0) + d.flops
            for name, value in d.engines.items():
                engines[core, name] = engines.get((core, name), 0.0) + value
        executions, errors = dict(t.executions), dict(t.errors)
        hits, misses = t.compile_hits, t.compile_misses
        col_bytes, col_ops = dict(t.collective_bytes), dict(t.collective_operations)
        buckets, lat_sum = list(t.latency_buckets), t.latency_sum
        pairs, exited = counter_sources(prev, cur)
        signs = [(proc, before, 1) for proc, before in pairs] + [(proc, None, -1) for proc in exited]
        for proc, before, sign in signs:  # exited processes: take off what was added before
            for key in EXECUTION_SUMMARY_KEYS:
                executions[key] += sign * _inc(proc.executions, before and before.executions, key)
            for key in ERROR_SUMMARY_KEYS:
                errors[key] += sign * _inc(proc.errors, before and before.errors, key)
            hits += sign * _inc(proc.compile_cache, before and before.compile_cache, "hits")
            misses += sign * _inc(proc.compile_cache, before and before.compile_cache, "misses")
            for link in LINK_TYPES:
                now_c = getattr(proc.collectives, link)
                old_c = getattr(before.collectives, link) if before else None
                col_bytes[link] += sign * _inc(now_c, old_c, "bytes")
                col_ops[link] += sign * _inc(now_c, old_c, "operations")
        if cur.latency_log:  # every execution of every process, each observed once by sequence
            if cur.latency_log[-1][0] < self._last_seq:  # the daemon restarted: numbering began again
                self._last_seq = 0
            for seq, lat in cur.latency_log:
                if seq > self._last_seq:
                    buckets[_bucket(lat.total)] += 1
                    lat_sum += lat.total
            self._last_seq = max(self._last_seq, cur.latency_log[-1][0])
        else:  # an older daemon: per-process latencies
            for proc in cur.runtime_processes:
                last = self._last_end.get(proc.pid, -math.inf)
                for lat in proc.latencies:
                    if lat.end > last:
                        buckets[_bucket(lat.total)] += 1
                        lat_sum += lat.total
                if proc.latencies:
                    self._last_end[proc.pid] = max(last, max(lat.end for lat in proc.latencies))
            live = {p.pid for p in cur.runtime_processes}
            self._last_end = {pid: end for pid, end in self._last_end.items() if pid in live}
        # a daemon restart resets its counters: never let a node counter go backwards
        executions = {k: max(v, t.executions[k]) for k, v in executions.items()}
        errors = {k: max(v, t.errors[k]) for k, v in errors.items()}
        hits, misses = max(hits, t.compile_hits), max(misses, t.compile_misses)
        col_bytes = {k: max(v, t.collective_bytes[k]) for k, v in col_bytes.items()}
        col_ops = {k: max(v, t.collective_operations[k]) for k, v in col_ops.items()}

        ecc = dict(t.ecc)
        before_hw = {c.neuron_device_index: c for c in prev.hardware_counters} if prev else {}
        for dev in cur.hardware_counters:
            old_dev = before_hw.get(dev.neuron_device_index)
            for key in HW_COUNTER_KEYS:
                inc = counter_delta(getattr(dev, key), getattr(old_dev, key) if old_dev else None)
                ecc[dev.neuron_device_index, key] = ecc.get((dev.neuron_device_index, key), 0) + int(inc)

        host_cpu = dict(t.host_cpu)
        for mode in VCPU_FIELDS:
            now_s = sum(getattr(v, mode) for v in cur.host.vcpus)
            host_cpu[mode] = max(host_cpu.get(mode, 0.0), now_s)

        self._t = Totals(
            busy=busy,
            engines=engines,
            flops=flops,
            executions=executions,
            errors=errors,
            compile_hits=hits,
            compile_misses=misses,
            collective_bytes=col_bytes,
            collective_operations=col_ops,
            ecc=ecc,
            host_cpu=host_cpu,
            latency_buckets=tuple(buckets),
            latency_sum=lat_sum,
        )
        return self._t


# -- compatible metrics (optional module) ---------------------------------------------------------


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


# -- the published state --------------------------------------------------------------------------


@dataclass(frozen=True)
class CollectedState:
    """Everything scrapes and REST calls read; replaced as a whole after each collection."""

    interval: float
    snapshot: Snapshot | None = None  # latest successful
    previous: Snapshot | None = None  # the one before it (start of the last period)
    rates: Mapping[int, CoreRates] | None = None
    totals: Totals = Totals()
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
    def period(self) -> float | None:
        if self.snapshot is None or self.previous is None:
            return None
        return max(self.snapshot.monotonic - self.previous.monotonic, 0.0)


def history_values(base: Snapshot, cur: Snapshot) -> dict[tuple[str, int | None], float]:
    """One history row: per-core rates over ``base`` -> ``cur``, HBM and host values at ``cur``."""
    values: dict[tuple[str, int | None], float] = {}
    hbm = hbm_by_core(cur)
    for core, r in core_rates(base, cur).items():
        values["utilization", core] = r.utilization
        values["flops_per_second", core] = r.flops_per_second
        values["hbm_used_bytes", core] = float(sum(hbm.get(core, {}).values()))
        for engine, ratio in r.engines.items():
            values[f"{engine}_engine_utilization", core] = ratio
    busy_now = sum(v.total - v.idle for v in cur.host.vcpus)
    busy_then = sum(v.total - v.idle for v in base.host.vcpus)
    total = sum(v.total for v in cur.host.vcpus) - sum(v.total for v in base.host.vcpus)
    if total > 0:
        values["host_cpu_utilization", None] = min(max((busy_now - busy_then) / total, 0.0), 1.0)
    values["host_memory_used_bytes", None] = float(cur.host.memory.used)
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
        self._acc = Accumulator()
        self._builder = ReportBuilder(monitor_config(interval))
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
            cur = fetch_snapshot(self.client, self._latencies_since(old.snapshot))  # type: ignore[arg-type]
        except (DaemonUnavailable, DaemonError, SnapshotError) as exc:
            self._check_registration = True
            self.state = replace(
                old, source_up=False, error=str(exc), duration=self.clock() - started, attempts=old.attempts + 1
            )
            return self.state
        prev = old.snapshot
        totals = self._acc.add(prev, cur)
        report = self._builder.update(cur)
        self.compat.update(report)
        inventory = old.inventory if old.source_up and old.inventory is not None else self._inventory(old)
        self._record_history(cur)
        if self._check_registration:
            self._register()
        self.state = CollectedState(
            interval=self.interval,
            snapshot=cur,
            previous=prev,
            rates=core_rates(prev, cur) if prev is not None else None,
            totals=totals,
            report=report,
            inventory=inventory,
            source_up=True,
            error="",
            duration=self.clock() - started,
            last_success=self.wall(),
            attempts=old.attempts + 1,
        )
        return self.state

    def _inventory(self, old: CollectedState) -> Inventory | None:
        """Device details (PCI address, NUMA, links): read after each (re)connection."""
        try:
            return inventory_from_dict(self.client.get("/inventory"))
        except (DaemonUnavailable, DaemonError, InventoryError):
            return old.inventory

    def _record_history(self, cur: Snapshot) -> None:
        base = self._history_base
        if base is None:
            self._history_base = cur
            return
        if cur.monotonic - base.monotonic < self.history_step - 1e-3 and cur.monotonic >= base.monotonic:
            return
        self.history.append(cur.time, history_values(base, cur))
        self._history_base = cur

    def _register(self) -> None:
        """Make sure the daemon lists this exporter as a tool (a restarted daemon forgot it)."""
        self._check_registration = False
        if self.session is not None and not self.session.ensure():
            self._check_registration = True
