"""Node totals for neuron-exporter's counters: each collection period's increases added up.

Counters published to scrapes must never go backwards: a process that exits keeps what it added,
and a restarted daemon (whose counters start again from zero) only adds. The increases are the
period's (``report.period``); the latency histogram observes every execution of the daemon's
latency log once, by sequence number.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from neurontools.contract.schema import ERROR_SUMMARY_KEYS, EXECUTION_SUMMARY_KEYS, VCPU_FIELDS
from neurontools.contract.snapshot import Snapshot
from neurontools.exporter.fields import LATENCY_BUCKETS
from neurontools.report.period import LINK_TYPES, Period, period_between


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
    collective_seconds: Mapping[str, float] = field(default_factory=lambda: dict.fromkeys(LINK_TYPES, 0.0))
    ecc: Mapping[tuple[int, str], int] = field(default_factory=dict)  # (device, event type) -> count
    host_cpu: Mapping[str, float] = field(default_factory=dict)  # mode -> seconds, all vCPUs
    latency_buckets: tuple[int, ...] = (0,) * (len(LATENCY_BUCKETS) + 1)  # per bucket, last is +Inf
    latency_sum: float = 0.0

    @property
    def latency_count(self) -> int:
        return sum(self.latency_buckets)


def _bucket(value: float) -> int:
    for i, bound in enumerate(LATENCY_BUCKETS):
        if value <= bound:
            return i
    return len(LATENCY_BUCKETS)


class Accumulator:
    """Adds each collection's increases into node totals (owned by the collection thread)."""

    def __init__(self) -> None:
        self._t = Totals()
        self._last_seq = 0  # sequence number of the last execution observed in the latency log

    @property
    def totals(self) -> Totals:
        return self._t

    def add(self, prev: Snapshot | None, cur: Snapshot, period: Period | None = None) -> Totals:
        """Add the increases from ``prev`` to ``cur`` (``prev`` None: the first collection, every
        counter counted from zero). ``period``: the caller's ``measure(prev, cur)`` if it has one."""
        period = period_between(prev, cur, period)
        t = self._t
        inc = period.node_counts  # never negative: a daemon restart cannot take node counters back
        buckets, lat_sum = self._observe_latencies(cur)
        self._t = Totals(
            **_core_work(t, period),
            executions={k: v + inc.executions[k] for k, v in t.executions.items()},
            errors={k: v + inc.errors[k] for k, v in t.errors.items()},
            compile_hits=t.compile_hits + inc.compile_hits,
            compile_misses=t.compile_misses + inc.compile_misses,
            collective_bytes={k: v + inc.collective_bytes[k] for k, v in t.collective_bytes.items()},
            collective_operations={k: v + inc.collective_operations[k] for k, v in t.collective_operations.items()},
            collective_seconds={k: v + inc.collective_seconds[k] for k, v in t.collective_seconds.items()},
            ecc=_ecc(t, period),
            host_cpu=_host_cpu(t, cur),
            latency_buckets=buckets,
            latency_sum=lat_sum,
        )
        return self._t

    def _observe_latencies(self, cur: Snapshot) -> tuple[tuple[int, ...], float]:
        """The histogram with every execution of the daemon's latency log not observed yet (by sequence)."""
        t = self._t
        buckets, lat_sum = list(t.latency_buckets), t.latency_sum
        if not cur.latency_log:
            return tuple(buckets), lat_sum
        if cur.latency_log[-1][0] < self._last_seq:  # the daemon restarted: numbering began again
            self._last_seq = 0
        for seq, lat in cur.latency_log:
            if seq > self._last_seq:
                buckets[_bucket(lat.total)] += 1
                lat_sum += lat.total
        self._last_seq = max(self._last_seq, cur.latency_log[-1][0])
        return tuple(buckets), lat_sum


def _core_work(t: Totals, period: Period) -> dict[str, Any]:
    """Per-core busy seconds, FLOPs and engine seconds with the period's added."""
    busy, flops, engines = dict(t.busy), dict(t.flops), dict(t.engines)
    for core, work in period.cores.items():
        busy[core] = busy.get(core, 0.0) + work.busy
        flops[core] = flops.get(core, 0) + work.flops
        for name, value in work.engines.items():
            engines[core, name] = engines.get((core, name), 0.0) + value
    return {"busy": busy, "flops": flops, "engines": engines}


def _ecc(t: Totals, period: Period) -> dict[tuple[int, str], int]:
    ecc = dict(t.ecc)
    for device, events in period.ecc.items():
        for key, value in events.items():
            ecc[device, key] = ecc.get((device, key), 0) + value
    return ecc


def _host_cpu(t: Totals, cur: Snapshot) -> dict[str, float]:
    """The real host's CPU seconds per mode; a value below the last one is ignored."""
    host_cpu = dict(t.host_cpu)
    for mode in VCPU_FIELDS:
        now_s = sum(getattr(v, mode) for v in cur.host.vcpus)
        host_cpu[mode] = max(host_cpu.get(mode, 0.0), now_s)
    return host_cpu
