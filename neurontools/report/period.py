"""What happened between two daemon snapshots: the period arithmetic, done once per collection.

Every figure a tool shows for "the last period" — a NeuronCore's utilization, its engines' busy
shares, FLOP/s, a process's executions and CPU time, the node's counter increases, ECC events,
the host's CPU shares — is derived here, from a baseline snapshot and a current one
(docs/snapshot.md for the counters, docs/architecture.md §Data flow for who reads what). The
neuron-monitor report groups (``report.groups``), neuron-top, neuron-exporter's metric families,
its REST API and its history all read a ``Period``; none of them subtracts counters itself.

Rules (docs/reference/neuron-monitor.md §Report):

* a counter's increase is ``counter_delta``: a counter that went backwards (a new process reusing
  a PID, a restarted daemon) counts from zero, like a Prometheus counter reset;
* a process missing from the baseline attached after it: its device counters count from zero;
  its CPU times are cumulative since the OS process started, so it has no CPU figure yet;
* ratios are ratios (0-1, clamped); percent belongs to the formats that print it;
* **per process** figures describe live runtime processes only (what neuron-monitor and
  neuron-top show: a process that exited is gone from the report at once);
* **per core** and **node** figures describe the device: they add the work of processes that
  exited during the period (the daemon moved their final counters into ``retired``), so node
  counters never lose work and a core's utilization is its real busy share.

Derived values are computed on first use and then kept (``cached_property``): a consumer that
never reads the node figures does not pay for them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from neurontools.contract.schema import (
    CORE_MEMORY_KEYS,
    ENGINE_KEYS,
    ERROR_SUMMARY_KEYS,
    EXECUTION_SUMMARY_KEYS,
    HW_COUNTER_KEYS,
    PROCESS_CPU_FIELDS,
    VCPU_FIELDS,
)
from neurontools.contract.snapshot_models import CoreCounters, Latency, ProcessSnapshot, Snapshot

LINK_TYPES = ("neuronlink", "efa")
# executions that ran to the end, whatever their outcome: one training step each
FINISHED_EXECUTIONS = ("completed", "completed_with_err", "completed_with_num_err")
IDLE_VCPU_FIELD = "idle"  # the one state that is not CPU work (io_wait counts as busy, as top does)


def counter_delta(cur: float, prev: float | None) -> float:
    """Increase of a cumulative counter; a counter that went backwards restarted from zero."""
    if prev is None or cur < prev:
        return cur
    return cur - prev


def elapsed(base: Snapshot | None, cur: Snapshot) -> float:
    """Seconds between two snapshots on the daemon's monotonic clock (0 without a baseline)."""
    if base is None:
        return 0.0
    return max(cur.monotonic - base.monotonic, 0.0)


def ratio(part: float, whole: float) -> float:
    """``part / whole`` clamped to 0-1; 0 when ``whole`` is not positive."""
    return min(max(part / whole, 0.0), 1.0) if whole > 0 else 0.0


@dataclass(frozen=True)
class CoreWork:
    """The work done on one NeuronCore over a period (by one process, or by all of them)."""

    seconds: float  # length of the period
    busy: float = 0.0  # simulated device-busy seconds
    flops: int = 0
    engines: Mapping[str, float] = field(default_factory=dict)  # busy seconds per engine

    @property
    def utilization(self) -> float:
        """Busy share of the period, 0-1."""
        return ratio(self.busy, self.seconds)

    @property
    def flops_per_second(self) -> float:
        return self.flops / self.seconds if self.seconds > 0 else 0.0

    def engine_utilization(self, engine: str) -> float:
        """Busy share of the period of one engine, 0-1."""
        return ratio(self.engines.get(engine, 0.0), self.seconds)

    @property
    def engine_utilizations(self) -> dict[str, float]:
        """Busy share of every engine (``ENGINE_KEYS`` order), 0-1."""
        return {engine: self.engine_utilization(engine) for engine in ENGINE_KEYS}


def _core_work(now: CoreCounters, before: CoreCounters | None, seconds: float) -> CoreWork:
    engines = {
        name: counter_delta(value, before.engines.get(name) if before is not None else None)
        for name, value in now.engines.items()
    }
    return CoreWork(
        seconds=seconds,
        busy=counter_delta(now.busy, before.busy if before is not None else None),
        flops=int(counter_delta(now.flops, before.flops if before is not None else None)),
        engines=engines,
    )


def _increase(now: object, before: object | None, key: str) -> int:
    """Increase of counter attribute ``key`` between two counter objects."""
    return int(counter_delta(getattr(now, key), getattr(before, key) if before is not None else None))


@dataclass(frozen=True)
class Counts:
    """Increases of a process's (or the node's) event counters over a period."""

    executions: Mapping[str, int]  # EXECUTION_SUMMARY_KEYS
    errors: Mapping[str, int]  # ERROR_SUMMARY_KEYS
    compile_hits: int
    compile_misses: int
    collective_bytes: Mapping[str, int]  # LINK_TYPES
    collective_operations: Mapping[str, int]
    collective_seconds: Mapping[str, float]

    @classmethod
    def between(cls, now: ProcessSnapshot, before: ProcessSnapshot | None) -> Counts:
        collectives = [
            (link, getattr(now.collectives, link), getattr(before.collectives, link) if before else None)
            for link in LINK_TYPES
        ]
        return cls(
            executions={k: _increase(now.executions, before and before.executions, k) for k in EXECUTION_SUMMARY_KEYS},
            errors={k: _increase(now.errors, before and before.errors, k) for k in ERROR_SUMMARY_KEYS},
            compile_hits=_increase(now.compile_cache, before and before.compile_cache, "hits"),
            compile_misses=_increase(now.compile_cache, before and before.compile_cache, "misses"),
            collective_bytes={link: _increase(n, b, "bytes") for link, n, b in collectives},
            collective_operations={link: _increase(n, b, "operations") for link, n, b in collectives},
            collective_seconds={
                link: float(counter_delta(n.seconds, b.seconds if b is not None else None))
                for link, n, b in collectives
            },
        )


@dataclass(frozen=True)
class ProcessPeriod:
    """One live runtime process over the period."""

    proc: ProcessSnapshot  # as it is now
    before: ProcessSnapshot | None  # as it was at the baseline; None: it attached after it
    seconds: float

    @cached_property
    def cores(self) -> dict[int, CoreWork]:
        """Work on every core it owns or has counters for, in core order (an owned core it never
        used: zero work)."""
        zero = CoreCounters(busy=0.0, flops=0)
        before = self.before.cores if self.before is not None else {}
        return {
            core: _core_work(self.proc.cores.get(core, zero), before.get(core), self.seconds)
            for core in sorted(set(self.proc.neuroncores) | set(self.proc.cores))
        }

    @cached_property
    def counts(self) -> Counts:
        return Counts.between(self.proc, self.before)

    @cached_property
    def cpu_seconds(self) -> dict[str, float] | None:
        """CPU seconds by ``PROCESS_CPU_FIELDS`` spent in the period; None without both readings."""
        if self.proc.cpu is None or self.before is None or self.before.cpu is None:
            return None
        now, then = self.proc.cpu, self.before.cpu
        return {k: counter_delta(getattr(now, k), getattr(then, k)) for k in PROCESS_CPU_FIELDS}

    def cpu_share(self, key: str) -> float | None:
        """CPU time of ``key`` over the period in vCPUs (1.0 = one vCPU all the time, may exceed
        1 for a multi-threaded process); None without a figure."""
        spent = self.cpu_seconds
        if spent is None:
            return None
        return spent[key] / self.seconds if self.seconds > 0 else 0.0

    @property
    def steps_per_second(self) -> float | None:
        """Executions that finished (``FINISHED_EXECUTIONS``) per second; None without elapsed time."""
        if self.seconds <= 0:
            return None
        before = self.before.executions if self.before is not None else None
        return sum(_increase(self.proc.executions, before, key) for key in FINISHED_EXECUTIONS) / self.seconds

    def latencies(self, since: float, until: float) -> tuple[Latency, ...]:
        """Its executions that ended in ``(since, until]`` (daemon monotonic seconds)."""
        return tuple(lat for lat in self.proc.latencies if since < lat.end <= until)


@dataclass(frozen=True)
class Period:
    """Everything derived from ``base`` -> ``cur``. Build it with ``measure``."""

    base: Snapshot | None
    cur: Snapshot

    @cached_property
    def seconds(self) -> float:
        return elapsed(self.base, self.cur)

    # -- processes --------------------------------------------------------------------------------

    @cached_property
    def processes(self) -> dict[int, ProcessPeriod]:
        """Every live runtime process, in the daemon's order."""
        out: dict[int, ProcessPeriod] = {}
        for proc in self.cur.runtime_processes:
            if proc.pid not in out:
                before = self.base.process(proc.pid) if self.base is not None else None
                out[proc.pid] = ProcessPeriod(proc, before, self.seconds)
        return out

    def process(self, pid: int) -> ProcessPeriod | None:
        return self.processes.get(pid)

    @cached_property
    def exited(self) -> tuple[ProcessSnapshot, ...]:
        """Runtime processes of the baseline that are gone now. Their final counters are in the
        daemon's ``retired`` totals; what they had at the baseline is taken off again."""
        if self.base is None:
            return ()
        live = {p.pid for p in self.cur.runtime_processes}
        return tuple(p for p in self.base.runtime_processes if p.pid not in live)

    @cached_property
    def _retired(self) -> ProcessPeriod:
        """The daemon's totals of exited processes over the period (pid 0)."""
        before = self.base.retired if self.base is not None else None
        return ProcessPeriod(self.cur.retired, before, self.seconds)

    def _contributors(self) -> list[ProcessPeriod]:
        """Whose counter increases make up the node's: the live processes and the retired totals."""
        return [*self.processes.values(), self._retired]

    # -- the device ------------------------------------------------------------------------------

    @cached_property
    def core_count(self) -> int:
        return self.cur.hardware.layout.core_count

    def _summed(
        self, contributors: list[ProcessPeriod], exited: tuple[ProcessSnapshot, ...] = ()
    ) -> dict[int, CoreWork]:
        """Work on every core of the instance: the sum over ``contributors``, less what ``exited``
        processes had at the baseline (never below zero)."""
        busy: dict[int, float] = {}
        flops: dict[int, int] = {}
        engines: dict[int, dict[str, float]] = {}
        for contributor in contributors:
            for core, work in contributor.cores.items():
                busy[core] = busy.get(core, 0.0) + work.busy
                flops[core] = flops.get(core, 0) + work.flops
                per_engine = engines.setdefault(core, {})
                for name, value in work.engines.items():
                    per_engine[name] = per_engine.get(name, 0.0) + value
        for proc in exited:
            for core, old in proc.cores.items():
                busy[core] = max(0.0, busy.get(core, 0.0) - old.busy)
                flops[core] = max(0, flops.get(core, 0) - old.flops)
                per_engine = engines.setdefault(core, {})
                for name, value in old.engines.items():
                    per_engine[name] = max(0.0, per_engine.get(name, 0.0) - value)
        every = set(range(self.core_count)) | set(busy)
        return {
            core: CoreWork(self.seconds, busy.get(core, 0.0), flops.get(core, 0), engines.get(core, {}))
            for core in sorted(every)
        }

    @cached_property
    def cores(self) -> dict[int, CoreWork]:
        """Work on every core of the instance over the period, by every process that used it,
        including processes that exited meanwhile (idle cores: zero work)."""
        return self._summed(self._contributors(), self.exited)

    def live_cores(self) -> dict[int, CoreWork]:
        """Work on every core of the instance by the live processes: the figures neuron-top shows
        next to the report's per-process ones."""
        return self._summed(list(self.processes.values()))

    @cached_property
    def node_counts(self) -> Counts:
        """Increases of the node's event counters: every live process, the retired totals, less
        what exited processes had at the baseline (never below zero)."""
        parts = [c.counts for c in self._contributors()]
        gone = [Counts.between(p, None) for p in self.exited]

        def total(get: Callable[..., int]) -> int:
            return max(sum(get(c) for c in parts) - sum(get(c) for c in gone), 0)

        def seconds(get: Callable[..., float]) -> float:
            return max(sum(get(c) for c in parts) - sum(get(c) for c in gone), 0.0)

        return Counts(
            executions={k: total(lambda c, k=k: c.executions[k]) for k in EXECUTION_SUMMARY_KEYS},
            errors={k: total(lambda c, k=k: c.errors[k]) for k in ERROR_SUMMARY_KEYS},
            compile_hits=total(lambda c: c.compile_hits),
            compile_misses=total(lambda c: c.compile_misses),
            collective_bytes={k: total(lambda c, k=k: c.collective_bytes[k]) for k in LINK_TYPES},
            collective_operations={k: total(lambda c, k=k: c.collective_operations[k]) for k in LINK_TYPES},
            collective_seconds={k: seconds(lambda c, k=k: c.collective_seconds[k]) for k in LINK_TYPES},
        )

    @cached_property
    def ecc(self) -> dict[int, dict[str, int]]:
        """ECC events per device during the period (device index order)."""
        before = {d.neuron_device_index: d for d in self.base.hardware_counters} if self.base is not None else {}
        out: dict[int, dict[str, int]] = {}
        for dev in sorted(self.cur.hardware_counters, key=lambda d: d.neuron_device_index):
            old = before.get(dev.neuron_device_index)
            out[dev.neuron_device_index] = {k: _increase(dev, old, k) for k in HW_COUNTER_KEYS}
        return out

    # -- gauges at the end of the period ---------------------------------------------------------

    @cached_property
    def hbm(self) -> dict[int, dict[str, int]]:
        """Device memory held on each core now, by category, summed over the runtime processes."""
        out: dict[int, dict[str, int]] = {}
        for proc in self.cur.runtime_processes:
            for core, usage in proc.memory.cores.items():
                per = out.setdefault(core, dict.fromkeys(CORE_MEMORY_KEYS, 0))
                for cat in CORE_MEMORY_KEYS:
                    per[cat] += getattr(usage, cat)
        return out

    def hbm_of_device(self, device: int) -> dict[str, int]:
        """Device memory held on one device now, by category."""
        used = dict.fromkeys(CORE_MEMORY_KEYS, 0)
        for core in self.cur.hardware.layout.cores_of(device):
            for cat, value in self.hbm.get(core, {}).items():
                used[cat] += value
        return used

    @cached_property
    def owners(self) -> dict[int, ProcessSnapshot]:
        """The runtime process owning each core now."""
        return {core: proc for proc in self.cur.runtime_processes for core in proc.neuroncores}

    # -- the host ---------------------------------------------------------------------------------

    @cached_property
    def vcpu_seconds(self) -> tuple[dict[str, float] | None, ...]:
        """Per vCPU, seconds spent in each state (``VCPU_FIELDS``) during the period; None for a
        vCPU the baseline does not have (or without a baseline)."""
        then = self.base.host.vcpus if self.base is not None else ()
        out: list[dict[str, float] | None] = []
        for i, now in enumerate(self.cur.host.vcpus):
            if i >= len(then):
                out.append(None)
                continue
            out.append({k: max(getattr(now, k) - getattr(then[i], k), 0.0) for k in VCPU_FIELDS})
        return tuple(out)

    @cached_property
    def vcpu_shares(self) -> tuple[dict[str, float] | None, ...]:
        """Per vCPU, the share of its elapsed time in each state (sums to 1); None for a vCPU
        without elapsed time in the period."""
        out: list[dict[str, float] | None] = []
        for spent in self.vcpu_seconds:
            total = sum(spent.values()) if spent is not None else 0.0
            out.append({k: v / total for k, v in spent.items()} if spent is not None and total > 0 else None)
        return tuple(out)

    @cached_property
    def vcpu_mean_shares(self) -> dict[str, float] | None:
        """Per state (``VCPU_FIELDS``), its share averaged over the vCPUs with elapsed time in the
        period; None when none had any."""
        shown = [shares for shares in self.vcpu_shares if shares is not None]
        if not shown:
            return None
        return {k: sum(shares[k] for shares in shown) / len(shown) for k in VCPU_FIELDS}

    @cached_property
    def host_cpu_utilization(self) -> float | None:
        """Share of all vCPUs' elapsed time spent not idle, 0-1; None without elapsed time."""
        spent = [s for s in self.vcpu_seconds if s is not None]
        total = sum(sum(s.values()) for s in spent)
        if total <= 0:
            return None
        return ratio(sum(sum(v for k, v in s.items() if k != IDLE_VCPU_FIELD) for s in spent), total)

    @cached_property
    def context_switches(self) -> int:
        before = self.base.host.context_switches if self.base is not None else None
        return int(counter_delta(self.cur.host.context_switches, before))


def measure(base: Snapshot | None, cur: Snapshot) -> Period:
    """The period from ``base`` (None: none yet) to ``cur``."""
    return Period(base, cur)


def period_between(base: Snapshot | None, cur: Snapshot, known: Period | None = None) -> Period:
    """The period from ``base`` to ``cur``: ``known`` when it is that one (a caller passing on the
    period it measured already), else measured now."""
    if known is not None and known.base is base and known.cur is cur:
        return known
    return measure(base, cur)
