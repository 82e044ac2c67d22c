"""neuron-monitor report (docs/reference/neuron-monitor.md) -> ``Sample``, as mapped by docs/reference/neuron-top.md.

The report's percentages (utilization, CPU usage) become the ``Sample``'s 0-1 shares here.

Lenient by design: the report may come from a real neuron-monitor of any 2.x version. A group
that is absent, carries an ``error``, or has a value of the wrong type leaves its figures ``None``
(``NA`` on screen) instead of failing the whole refresh.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from neurontools.contract.inventory import CoreLayout
from neurontools.contract.json_values import index_or_none, integer_or_none, number_or_none, object_or_none
from neurontools.contract.percent import share
from neurontools.contract.schema import (
    CORE_MEMORY_KEYS,
    EXECUTION_STATS,
    HOST_MEMORY_KEYS,
    MEMORY_USED,
    NEURON_RUNTIME_VCPU_USAGE,
    NEURONCORE_COUNTERS,
    SUBGRAPH_DEVICE_MEMORY_KEYS,
    VCPU_USAGE,
)
from neurontools.report.period import FINISHED_EXECUTIONS
from neurontools.top.model import AppSample, CoreStat, ModelMemory, Sample

# Bounds of what a report may claim (docs/fuzzing.md): a number outside them is unknown (NA). No
# counter of a real report reaches 2**63; no instance has more devices or cores per device than
# these (trn1/trn2: 16 devices, 2 or 8 cores).
MAX_INT = 2**63
MAX_DEVICES = 1024
MAX_CORES_PER_DEVICE = 64
MAX_INDEX_DIGITS = 9


# the shared lenient JSON readers (neurontools/contract/json_values.py) with this reader's bounds
_obj = object_or_none
_num = partial(number_or_none, bound=MAX_INT)  # a finite number; None: missing, not a number, NaN, infinite, too big
_int = partial(integer_or_none, bound=MAX_INT)
_core_index = partial(index_or_none, max_digits=MAX_INDEX_DIGITS)


def _share(value: Any) -> float | None:
    """A report's percent figure as a 0-1 share; None when it is not a usable number."""
    number = _num(value)
    return share(number) if number is not None else None


def _in_range(value: int | None, limit: int) -> int | None:
    return value if value is not None and 1 <= value <= limit else None


def _path(data: Any, *keys: str) -> Any:
    for key in keys:
        obj = _obj(data)
        if obj is None:
            return None
        data = obj.get(key)
    return data


def _group(groups: Mapping[str, Any] | None, name: str) -> Mapping[str, Any] | None:
    """A collected group without an error, or None."""
    group = _obj(groups.get(name)) if groups is not None else None
    if group is None or group.get("error"):
        return None
    return group


def _ints(data: Any, keys: tuple[str, ...]) -> dict[str, int] | None:
    obj = _obj(data)
    if obj is None:
        return None
    values: dict[str, int] = {}
    for k in keys:
        value = _int(obj.get(k))
        if value is None:
            return None
        values[k] = value
    return values


def _core_stats(group: Mapping[str, Any] | None) -> dict[int, CoreStat] | None:
    in_use = _obj(group.get("neuroncores_in_use")) if group is not None else None
    if in_use is None:
        return None
    stats: dict[int, CoreStat] = {}
    for key, value in in_use.items():
        core = _core_index(key)
        if core is not None:
            stats[core] = CoreStat(
                utilization=_share(_path(value, "neuroncore_utilization")), flops=_num(_path(value, "flops"))
            )
    return dict(sorted(stats.items()))


def _models(group: Mapping[str, Any], layout: CoreLayout | None) -> tuple[ModelMemory, ...]:
    models: list[ModelMemory] = []
    raw = group.get("loaded_models")
    for entry in raw if isinstance(raw, list) else []:
        name, model_id = _path(entry, "name"), _int(_path(entry, "model_id"))
        subgraphs = _obj(_path(entry, "subgraphs"))
        if not isinstance(name, str) or model_id is None or subgraphs is None or layout is None:
            continue
        per_core: dict[int, tuple[dict[str, int], dict[str, int]]] = {}
        for sub in subgraphs.values():
            device_idx, local = _int(_path(sub, "neuron_device_index")), _int(_path(sub, "neuroncore_index"))
            breakdown = _path(sub, "memory_used_bytes", "usage_breakdown")
            dev = _ints(_path(breakdown, "neuron_device"), SUBGRAPH_DEVICE_MEMORY_KEYS)
            host = _ints(_path(breakdown, "host"), HOST_MEMORY_KEYS)
            if device_idx is None or local is None or dev is None or host is None:
                continue
            core = layout.core_id(device_idx, local)
            dev_sum, host_sum = per_core.setdefault(core, (dict.fromkeys(dev, 0), dict.fromkeys(host, 0)))
            for k, v in dev.items():
                dev_sum[k] += v
            for k, v in host.items():
                host_sum[k] += v
        for core, (dev_sum, host_sum) in sorted(per_core.items()):
            models.append(ModelMemory(name=name, model_id=model_id, core=core, device=dev_sum, host=host_sum))
    return tuple(models)


def _memory(group: Mapping[str, Any] | None, layout: CoreLayout | None) -> dict[str, Any]:
    """The ``AppSample`` fields of a ``memory_used`` group."""
    app: dict[str, Any] = {}
    used = _obj(group.get("neuron_runtime_used_bytes")) if group is not None else None
    if group is None or used is None:
        return app
    app["host_total"] = _int(used.get("host"))
    app["device_total"] = _int(used.get("neuron_device"))
    app["host_memory"] = _ints(_path(used, "usage_breakdown", "host"), HOST_MEMORY_KEYS)
    per_core = _obj(_path(used, "usage_breakdown", "neuroncore_memory_usage"))
    if per_core is not None:
        cores = {}
        for key, value in per_core.items():
            core, usage = _core_index(key), _ints(value, CORE_MEMORY_KEYS)
            if core is not None and usage is not None:
                cores[core] = usage
        app["core_memory"] = dict(sorted(cores.items()))
    app["models"] = _models(group, layout)
    return app


def _steps_per_second(group: Mapping[str, Any] | None) -> float | None:
    if group is None:
        return None
    period = _num(group.get("period"))
    counts = [_int(_path(group, "execution_summary", key)) for key in FINISHED_EXECUTIONS]
    known = [c for c in counts if c is not None]
    if not period or len(known) != len(counts):
        return None
    return sum(known) / period


def _cpu_pair(usage: Any) -> tuple[float, float] | None:
    user, system = _share(_path(usage, "user")), _share(_path(usage, "system"))
    return (user, system) if user is not None and system is not None else None


def app_from_entry(entry: Any, layout: CoreLayout | None) -> AppSample | None:
    """One ``neuron_runtime_data`` entry; None when it has no usable pid."""
    pid = _int(_path(entry, "pid"))
    if pid is None:
        return None
    tag = _path(entry, "neuron_runtime_tag")
    groups = _obj(_path(entry, "report"))
    counters = _group(groups, NEURONCORE_COUNTERS)
    memory = _group(groups, MEMORY_USED)
    vcpu = _group(groups, NEURON_RUNTIME_VCPU_USAGE)
    app: dict[str, Any] = {
        "pid": pid,
        "tag": tag if isinstance(tag, str) and tag else str(pid),
        "core_stats": _core_stats(counters),
        "vcpu": _cpu_pair(vcpu.get("vcpu_usage")) if vcpu is not None else None,
        "steps_per_second": _steps_per_second(_group(groups, EXECUTION_STATS)),
    }
    app.update(_memory(memory, layout))
    if app["core_stats"] is not None or app.get("core_memory") is not None:
        app["cores"] = tuple(sorted(set(app["core_stats"] or ()) | set(app.get("core_memory") or ())))
    return AppSample(**app)


def sample_from_report(report: Mapping[str, Any], tools_version: str) -> Sample:
    """The figures of one report (``history`` and ``sequence`` are the sampler's)."""
    hardware = _obj(report.get("neuron_hardware_info")) or {}
    instance = _obj(report.get("instance_info")) or {}
    device_count = _in_range(_int(hardware.get("neuron_device_count")), MAX_DEVICES)
    hw_ok = not hardware.get("error") and device_count is not None

    def text(obj: Mapping[str, Any], key: str) -> str | None:
        value = obj.get(key)
        return value if isinstance(value, str) and value else None

    cores_per_device = _in_range(_int(hardware.get("neuroncore_per_device_count")), MAX_CORES_PER_DEVICE)
    if not hw_ok:
        cores_per_device = None
    vcpu = _group(_obj(report.get("system_data")), VCPU_USAGE)
    runtimes = report.get("neuron_runtime_data")
    entries = runtimes if isinstance(runtimes, list) else []
    layout = CoreLayout(device_count, cores_per_device) if device_count is not None and cores_per_device else None
    apps = [app_from_entry(e, layout) for e in entries]
    return Sample(
        tools_version=tools_version,
        instance_id=text(instance, "instance_id"),
        instance_type=text(instance, "instance_type"),
        neuroncore_version=text(hardware, "neuroncore_version") if hw_ok else None,
        device_count=device_count if hw_ok else None,
        cores_per_device=cores_per_device or None,
        device_memory_size=(_int(hardware.get("neuron_device_memory_size")) or None) if hw_ok else None,
        system_vcpu=_cpu_pair(vcpu.get("average_usage")) if vcpu is not None else None,
        apps=tuple(a for a in apps if a is not None),
    )
