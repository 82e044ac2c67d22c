"""Node totals for neuron-exporter's counters: each collection period's increases added up.

Counters published to scrapes must never go backwards: a process that exits keeps what it added,
and a restarted daemon (whose counters start again from zero) only adds. The increases are the
period's (``report.period``); the latency histogram observes every execution of the daemon's
latency log once, by sequence number (older daemons: per process, by end time).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

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
        self._last_end: dict[int, float] = {}  # pid -> end time of the last latency observed
        self._last_seq = 0  # sequence number of the last execution observed in the latency log

    @property
    def totals(self) -> Totals:
        return self._t

    def add(self, prev: Snapshot | None, cur: Snapshot, period: Period | None = None) -> Totals:
        """Add the increases from ``prev`` to ``cur`` (``prev`` None: the first collection, every
        counter counted from zero). ``period``: the caller's ``measure(prev, cur)`` if it has one."""
        period = period_between(prev, cur, period)
        t = self._t
        busy, flops, engines = dict(t.busy), dict(t.flops), dict(t.engines)
        for core, work in period.cores.items():
            busy[core] = busy.get(core, 0.0) + work.busy
            flops[core] = flops.get(core, 0) + work.flops
            for name, value in work.engines.items():
                engines[core, name] = engines.get((core, name), 0.0) + value
        inc = period.node_counts  # never negative: a daemon restart cannot take node counters back
        executions = {k: v + inc.executions[k] for k, v in t.executions.items()}
        errors = {k: v + inc.errors[k] for k, v in t.errors.items()}
        hits, misses = t.compile_hits + inc.compile_hits, t.compile_misses + inc.compile_misses
        col_bytes = {k: v + inc.collective_bytes[k] for k, v in t.collective_bytes.items()}
        col_ops = {k: v + inc.collective_operations[k] for k, v in t.collective_operations.items()}
        col_seconds = {k: v + inc.collective_seconds[k] for k, v in t.collective_seconds.items()}
        buckets, lat_sum = list(t.latency_buckets), t.latency_sum
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
        ecc = dict(t.ecc)
        for device, events in period.ecc.items():
            for key, value in events.items():
                ecc[device, key] = ecc.get((device, key), 0) + value

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
            collective_seconds=col_seconds,
            ecc=ecc,
            host_cpu=host_cpu,
            latency_buckets=tuple(buckets),
            latency_sum=lat_sum,
        )
        return self._t


