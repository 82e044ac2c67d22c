"""The figures of one tab (all applications, or one), computed from a ``Sample`` (pure functions).

Cheap enough for the UI thread: switching tabs needs no new data, and each function goes once
through the selected applications and the cores they own (not cores x applications: a
trn1.32xlarge job is 32 processes on 32 cores). Rules, in the spirit of
neuron-top's ``all`` tab: a NeuronCore's value is the sum over the selected applications that own
it; a core no selected application owns is idle (0); a core owned by an application whose
counters are not known yet is ``None`` (``NA``), and so is any total that includes it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from neurontools.contract.names import DEVICE_CATEGORIES, HOST_CATEGORIES
from neurontools.contract.schema import CORE_MEMORY_KEYS
from neurontools.report.fields import MEMORY_TOTAL
from neurontools.top.model import AppSample, Sample

# Memory Usage Summary rows: (label, key); key None = the row's total. Labels and order from
# the category table (report.names).
HOST_ROW: tuple[tuple[str, str | None], ...] = (
    (MEMORY_TOTAL.label, None),
    *((c.label, c.key) for c in HOST_CATEGORIES),
)
DEVICE_ROW: tuple[tuple[str, str | None], ...] = (
    (MEMORY_TOTAL.label, None),
    *((c.label, c.key) for c in DEVICE_CATEGORIES),
)


@dataclass(frozen=True)
class CoreValue:
    utilization: float | None
    flops: float | None


@dataclass(frozen=True)
class Tab:
    number: int  # 1-based, as the keys 1-9 select it
    label: str  # "all", the process tag, or its PID
    pid: int | None  # None for "all"


def selected(sample: Sample, pid: int | None) -> tuple[AppSample, ...]:
    if pid is None:
        return sample.apps
    app = sample.app(pid)
    return (app,) if app is not None else ()


def _owned(app: AppSample, count: int) -> Collection[int] | None:
    """The cores among the first ``count`` that ``app`` owns; None when its cores are not known."""
    cores = app.cores if app.cores is not None else app.core_stats
    if cores is None:
        return None
    return {core for core in cores if 0 <= core < count}


def core_utilizations(sample: Sample, pid: int | None, count: int) -> tuple[list[float | None], list[float | None]]:
    """(utilization, FLOP/s) of each of the first ``count`` cores: the sum over the selected
    applications that own it (utilization capped at 1); None when one of them has no figure for
    it, or when one of them does not say which cores it owns."""
    if not sample.live:
        return [None] * count, [None] * count
    util: list[float | None] = [0.0] * count
    flops: list[float | None] = [0.0] * count
    for app in selected(sample, pid):
        owned = _owned(app, count)
        if owned is None:  # it may own any core: nothing is known
            return [None] * count, [None] * count
        stats = app.core_stats
        for core in owned:
            stat = stats.get(core) if stats is not None else None
            u, f = util[core], flops[core]
            util[core] = u + stat.utilization if u is not None and stat and stat.utilization is not None else None
            flops[core] = f + stat.flops if f is not None and stat and stat.flops is not None else None
    return [min(u, 1.0) if u is not None else None for u in util], flops


def core_values(sample: Sample, pid: int | None, count: int) -> list[CoreValue]:
    util, flops = core_utilizations(sample, pid, count)
    return [CoreValue(u, f) for u, f in zip(util, flops, strict=True)]


def _sum(values: Iterable[float | None]) -> float | None:
    total = 0.0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def average(values: Sequence[float | None]) -> float | None:
    total = _sum(values)
    return total / len(values) if total is not None and values else None


def total(values: Sequence[float | None]) -> float | None:
    return _sum(values) if values else None


def runtime_vcpu(sample: Sample, pid: int | None) -> tuple[float, float] | None:
    """CPU use of the selected applications (sum of their user and system shares)."""
    apps = selected(sample, pid)
    vcpus = [app.vcpu for app in apps if app.vcpu is not None]
    if not sample.live or len(vcpus) != len(apps):
        return None
    return (sum(v[0] for v in vcpus), sum(v[1] for v in vcpus))


MemoryRow = list[tuple[str, int | None]]


def host_memory(sample: Sample, pid: int | None) -> MemoryRow:
    return _memory_row(sample, pid, HOST_ROW, lambda app: app.host_total, lambda app: app.host_memory)


def device_memory(sample: Sample, pid: int | None) -> MemoryRow:
    return _memory_row(sample, pid, DEVICE_ROW, lambda app: app.device_total, _device_parts)


def _device_parts(app: AppSample) -> Mapping[str, int] | None:
    """An application's device memory by category, summed over its cores."""
    if app.core_memory is None:
        return None
    return {key: sum(u[key] for u in app.core_memory.values()) for _, key in DEVICE_ROW if key is not None}


def _memory_row(
    sample: Sample,
    pid: int | None,
    rows: Sequence[tuple[str, str | None]],
    total: Callable[[AppSample], int | None],
    parts: Callable[[AppSample], Mapping[str, int] | None],
) -> MemoryRow:
    """``rows`` (label, category; None: the total) summed over the selected applications; all None
    unless the sample is live and every application reports its memory."""
    unknown: MemoryRow = [(label, None) for label, _ in rows]
    if not sample.live:
        return unknown
    known: list[tuple[int, Mapping[str, int]]] = []
    for app in selected(sample, pid):
        app_total, app_parts = total(app), parts(app)
        if app_total is None or app_parts is None:
            return unknown
        known.append((app_total, app_parts))
    return [(label, sum(t if key is None else p.get(key, 0) for t, p in known)) for label, key in rows]


def cores_memory(sample: Sample, pid: int | None, count: int) -> list[dict[str, int] | None]:
    """Device memory on each of the first ``count`` cores by category, summed over the selected
    applications; None for a core that one of them may own without saying how much it holds."""
    if not sample.live:
        return [None] * count
    usage: list[dict[str, int] | None] = [dict.fromkeys(CORE_MEMORY_KEYS, 0) for _ in range(count)]
    for app in selected(sample, pid):
        if app.core_memory is None:
            owned = _owned(app, count)
            for core in owned if owned is not None else range(count):
                usage[core] = None
            continue
        for core, values in app.core_memory.items():
            total = usage[core] if 0 <= core < count else None
            if total is not None:
                for key, value in values.items():
                    total[key] += value
    return usage


def core_memory(sample: Sample, pid: int | None, core: int) -> dict[str, int] | None:
    """Device memory on ``core`` by category, summed over the selected applications."""
    return cores_memory(sample, pid, core + 1)[core] if core >= 0 else None


def hbm_used(sample: Sample, pid: int | None) -> list[int | None]:
    """Device memory used on each Neuron device by the selected applications."""
    layout = sample.layout
    if layout is None:
        return []
    usage = cores_memory(sample, pid, layout.core_count)
    used: list[int | None] = []
    for device in range(layout.device_count):
        cores = [usage[c] for c in layout.cores_of(device)]
        known = [c for c in cores if c is not None]
        used.append(None if len(known) != len(cores) else sum(sum(c.values()) for c in known))
    return used


def tabs(sample: Sample) -> tuple[Tab, ...]:
    return (Tab(1, "all", None), *(Tab(i + 2, app.tag, app.pid) for i, app in enumerate(sample.apps)))
