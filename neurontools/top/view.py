"""The figures of one tab (all applications, or one), computed from a ``Sample`` (pure functions).

Cheap enough for the UI thread: switching tabs needs no new data. Rules, in the spirit of
neuron-top's ``all`` tab: a NeuronCore's value is the sum over the selected applications that own
it; a core no selected application owns is idle (0); a core owned by an application whose
counters are not known yet is ``None`` (``NA``), and so is any total that includes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from neurontools.report.schema import CORE_MEMORY_KEYS
from neurontools.top.model import AppSample, Sample

# Memory Usage Summary rows: (label, key); key None = the row's total.
HOST_ROW: tuple[tuple[str, str | None], ...] = (
    ("Total", None),
    ("Tensors", "tensors"),
    ("Constants", "constants"),
    ("DMA Buffers", "dma_buffers"),
    ("App. Memory", "application_memory"),
)
DEVICE_ROW: tuple[tuple[str, str | None], ...] = (
    ("Total", None),
    ("Tensors", "tensors"),
    ("Constants", "constants"),
    ("Model Code", "model_code"),
    ("Runtime Memory", "runtime_memory"),
    ("Model Scratchpad", "model_shared_scratchpad"),
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


def _owns(app: AppSample, core: int) -> bool | None:
    """Whether ``app`` owns ``core``; None when its cores are not known."""
    if app.cores is not None:
        return core in app.cores
    if app.core_stats is not None:
        return core in app.core_stats
    return None


def core_values(sample: Sample, pid: int | None, count: int) -> list[CoreValue]:
    if not sample.live:
        return [CoreValue(None, None)] * count
    apps = selected(sample, pid)
    values = []
    for core in range(count):
        util: float | None = 0.0
        flops: float | None = 0.0
        for app in apps:
            owns = _owns(app, core)
            if owns is False:
                continue
            stat = app.core_stats.get(core) if app.core_stats is not None and owns else None
            util = util + stat.utilization if util is not None and stat and stat.utilization is not None else None
            flops = flops + stat.flops if flops is not None and stat and stat.flops is not None else None
        values.append(CoreValue(min(util, 100.0) if util is not None else None, flops))
    return values


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
    """CPU use of the selected applications (sum of their user and system percentages)."""
    apps = selected(sample, pid)
    if not sample.live or any(app.vcpu is None for app in apps):
        return None
    return (sum(app.vcpu[0] for app in apps), sum(app.vcpu[1] for app in apps))  # type: ignore[index]


def host_memory(sample: Sample, pid: int | None) -> list[tuple[str, int | None]]:
    apps = selected(sample, pid)
    known = sample.live and all(app.host_memory is not None and app.host_total is not None for app in apps)
    row = []
    for label, key in HOST_ROW:
        if not known:
            row.append((label, None))
        elif key is None:
            row.append((label, sum(app.host_total or 0 for app in apps)))
        else:
            row.append((label, sum((app.host_memory or {}).get(key, 0) for app in apps)))
    return row


def device_memory(sample: Sample, pid: int | None) -> list[tuple[str, int | None]]:
    apps = selected(sample, pid)
    known = sample.live and all(app.core_memory is not None and app.device_total is not None for app in apps)
    row = []
    for label, key in DEVICE_ROW:
        if not known:
            row.append((label, None))
        elif key is None:
            row.append((label, sum(app.device_total or 0 for app in apps)))
        else:
            row.append((label, sum(u[key] for app in apps for u in (app.core_memory or {}).values())))
    return row


def core_memory(sample: Sample, pid: int | None, core: int) -> dict[str, int] | None:
    """Device memory on ``core`` by category, summed over the selected applications."""
    if not sample.live:
        return None
    usage = dict.fromkeys(CORE_MEMORY_KEYS, 0)
    for app in selected(sample, pid):
        if app.core_memory is None:
            if _owns(app, core) is False:
                continue
            return None
        for key, value in app.core_memory.get(core, {}).items():
            usage[key] += value
    return usage


def hbm_used(sample: Sample, pid: int | None) -> list[int | None]:
    """Device memory used on each Neuron device by the selected applications."""
    devices, per = sample.device_count or 0, sample.cores_per_device or 0
    used: list[int | None] = []
    for device in range(devices):
        cores = [core_memory(sample, pid, device * per + local) for local in range(per)]
        used.append(None if any(c is None for c in cores) else sum(sum(c.values()) for c in cores))  # type: ignore[union-attr]
    return used


def tabs(sample: Sample) -> tuple[Tab, ...]:
    return (Tab(1, "all", None), *(Tab(i + 2, app.tag, app.pid) for i, app in enumerate(sample.apps)))
