"""Assemble neuron-monitor reports (docs/reference/neuron-monitor.md) from daemon snapshots.

Each configured group is collected on its own schedule. ``ReportBuilder`` remembers, per group,
the snapshot it was last collected from (its baseline) and its latest output; every report
carries the latest output of every group collected so far (docs/reference/neuron-monitor.md §Report).

First collection of a group (no baseline, e.g. the first report after start): gauge groups
(``memory_used``, ``memory_info``) are reported with ``period`` 0; rate and per-period-count
groups (``neuroncore_counters``, ``execution_stats``, ``neuron_runtime_vcpu_usage``,
``vcpu_usage``, ``neuron_hw_counters``) are left out until their second collection, one period
later. This reproduces the real tool's first line, which holds ``memory_info`` but not
``vcpu_usage``. See ``groups`` for how processes that appear between collections are handled.

Runtime entries list every Neuron runtime process of the current snapshot watched by a
``neuron_runtimes`` entry (first matching ``tag_filter``), in the daemon's order; a process that
exited disappears at once, a new one is listed with the groups collected for it so far (possibly
none yet). ``tool`` processes are never listed.

Daemon unreachable (``update_unavailable``): the runtime list is empty, due system groups carry
the error with zero values, ``neuron_hardware_info`` carries the error with zero values (as the
real tool does when the driver is gone), ``instance_info`` keeps the last known identity.
Baselines are kept, so the first collection after the daemon comes back covers the outage.

The system metric type ``k8s_info`` (docs/kubernetes.md) is collected like a gauge group but
written as the report's last top-level object, ``neuron_k8s_info``, as the real tool places it.

Reports share group objects with the builder's state: treat them as read-only.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from neurontools.contract.schema import (
    APP_GROUPS,
    EXECUTION_STATS,
    K8S_INFO,
    MEMORY_INFO,
    MEMORY_USED,
    NEURON_HW_COUNTERS,
    NEURON_RUNTIME_VCPU_USAGE,
    NEURONCORE_COUNTERS,
    SYSTEM_GROUPS,
    TOP_LEVEL_GROUPS,
    VCPU_USAGE,
)
from neurontools.contract.snapshot_models import LoadedModel, ProcessMemory, ProcessSnapshot, Snapshot
from neurontools.report import groups as g
from neurontools.report.monitor_config import GroupKey, MonitorConfig
from neurontools.report.period import Period, measure

if TYPE_CHECKING:
    from neurontools.contract.inventory import HardwareInfo, InstanceIdentity

Report = dict[str, Any]


def app_group(group: str, period: Period, proc: ProcessSnapshot, memory: g.MemoryParts | None = None) -> g.Group | None:
    """One application-level group of ``proc`` over ``period``; None when it cannot be computed
    yet. ``memory``: ``memory_used``'s parts when the caller has them already."""
    if group == MEMORY_USED:
        return g.memory_used(proc, period.seconds, memory)
    process = period.process(proc.pid)
    if period.base is None or process is None:
        return None
    if group == NEURONCORE_COUNTERS:
        return g.neuroncore_counters(process)
    if group == EXECUTION_STATS:
        return g.execution_stats(process, period.base.monotonic, period.cur.monotonic)
    if group == NEURON_RUNTIME_VCPU_USAGE:
        return g.runtime_vcpu_usage(process)
    raise ValueError(f"not an application-level group: {group!r}")


def system_group(group: str, period: Period) -> g.Group | None:
    """One system-level group over ``period``; None when it cannot be computed yet."""
    if group == MEMORY_INFO:
        return g.memory_info(period.cur, period.seconds)
    if group == K8S_INFO:
        return g.neuron_k8s_info(period.cur, period.seconds)
    if period.base is None:
        return None
    if group == VCPU_USAGE:
        return g.vcpu_usage(period)
    if group == NEURON_HW_COUNTERS:
        return g.neuron_hw_counters(period)
    raise ValueError(f"not a system-level group: {group!r}")


class ReportBuilder:
    """Stateful report assembly: per-group baselines and latest outputs."""

    def __init__(self, config: MonitorConfig) -> None:
        self.config = config
        self._keys: tuple[GroupKey, ...] = config.group_keys()
        self._base: dict[GroupKey, Snapshot] = {}
        self._system: dict[str, g.Group] = {}
        self._app: dict[int, dict[str, g.Group]] = {}  # pid -> group -> output
        self._runtimes: list[tuple[int, str]] = []  # (pid, tag) of the listed processes
        # pid -> (memory, loaded models, memory_used parts made of them): they rarely change (a
        # SnapshotParser then hands the same objects back), so the parts are made again only then
        self._memory: dict[int, tuple[ProcessMemory, tuple[LoadedModel, ...], g.MemoryParts]] = {}
        self._instance: InstanceIdentity | None = None
        self._hardware: HardwareInfo | None = None
        self._hardware_error = ""

    @property
    def group_keys(self) -> tuple[GroupKey, ...]:
        return self._keys

    def latencies_since(self) -> float | None:
        """The daemon time after which executions still matter to the next report: every group's
        latency figures cover executions that ended after its last collection. None: all of them
        (a group not collected yet)."""
        bases = [self._base.get(key) for key in self._keys]
        if not bases or any(base is None for base in bases):
            return None
        return min(base.monotonic for base in bases if base is not None)

    def _due(self, due: Collection[GroupKey] | None) -> list[GroupKey]:
        if due is None:
            return list(self._keys)
        return [key for key in self._keys if key in due]

    def update(self, cur: Snapshot, due: Collection[GroupKey] | None = None, period: Period | None = None) -> Report:
        """Collect the ``due`` groups (default: all) from ``cur`` and return the full report.

        ``period``: the caller's ``measure(base, cur)`` when it has one (read for every group whose
        baseline is ``base``). A group with another baseline gets its own period, measured once
        per baseline."""
        periods: dict[int, Period] = {}
        if period is not None and period.cur is cur:
            periods[id(period.base)] = period

        def period_from(base: Snapshot | None) -> Period:
            known = periods.get(id(base))
            if known is None:
                known = periods[id(base)] = measure(base, cur)
            return known

        watched: list[tuple[ProcessSnapshot, int]] = []
        for proc in cur.runtime_processes:
            entry = self.config.runtime_for(proc.tag)
            if entry is not None:
                watched.append((proc, entry))
        live = {proc.pid for proc, _ in watched}
        self._app = {pid: outputs for pid, outputs in self._app.items() if pid in live}
        self._memory = {pid: known for pid, known in self._memory.items() if pid in live}

        for key in self._due(due):
            runtime, group = key
            base = self._base.get(key)
            if runtime is None:
                out = system_group(group, period_from(base))
                if out is None:
                    self._system.pop(group, None)
                else:
                    self._system[group] = out
            else:
                for proc, entry in watched:
                    if entry != runtime:
                        continue
                    outputs = self._app.setdefault(proc.pid, {})
                    memory = self._memory_parts(proc) if group == MEMORY_USED else None
                    out = app_group(group, period_from(base), proc, memory)
                    if out is None:
                        outputs.pop(group, None)
                    else:
                        outputs[group] = out
            self._base[key] = cur

        self._runtimes = [(proc.pid, proc.tag) for proc, _ in watched]
        self._instance, self._hardware, self._hardware_error = cur.instance, cur.hardware, ""
        return self.report()

    def _memory_parts(self, proc: ProcessSnapshot) -> g.MemoryParts:
        known = self._memory.get(proc.pid)
        if known is not None and known[0] == proc.memory and known[1] == proc.loaded_models:
            return known[2]
        parts = g.memory_parts(proc)
        self._memory[proc.pid] = (proc.memory, proc.loaded_models, parts)
        return parts

    def update_unavailable(self, error: str, due: Collection[GroupKey] | None = None) -> Report:
        """The daemon could not be read at a wake-up: report ``error`` where the data would be."""
        for runtime, group in self._due(due):
            if runtime is None:
                self._system[group] = g.unavailable_system_group(group, error)
        self._app.clear()
        self._runtimes = []
        self._hardware_error = error or "Neuron devices are not available"
        return self.report()

    def report(self) -> Report:
        """The current report: latest output of every group collected so far."""
        runtime_data = []
        for pid, tag in self._runtimes:
            outputs = self._app.get(pid, {})
            runtime_data.append(
                {
                    "pid": pid,
                    "neuron_runtime_tag": tag,
                    "error": "",
                    "report": {name: outputs[name] for name in APP_GROUPS if name in outputs},
                }
            )
        hardware = None if self._hardware_error else self._hardware
        report = {
            "neuron_runtime_data": runtime_data,
            "system_data": {name: self._system[name] for name in SYSTEM_GROUPS if name in self._system},
            "instance_info": g.instance_info(self._instance),
            "neuron_hardware_info": g.hardware_info(hardware, self._hardware_error),
        }
        for group, key in TOP_LEVEL_GROUPS.items():  # neuron_k8s_info, once collected
            if group in self._system:
                report[key] = self._system[group]
        return report


def build_report(
    prev: Snapshot | None,
    cur: Snapshot,
    config: MonitorConfig,
    *,
    groups_due: Collection[GroupKey] | None = None,
) -> Report:
    """The report for the period from ``prev`` to ``cur`` (stateless form of ``ReportBuilder``).

    ``groups_due`` selects groups by key ``(runtime entry index or None, group type)``, see
    ``MonitorConfig.group_keys()``; default: every configured group. ``prev=None`` gives a first
    report (gauge groups only, period 0).
    """
    builder = ReportBuilder(config)
    if prev is not None:
        builder.update(prev, groups_due)
    return builder.update(cur, groups_due)
