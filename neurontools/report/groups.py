"""One function per neuron-monitor group: the group object in the report's format, written from
the period's figures (``report.period``: counter increases, rates and shares are derived there,
not here).

Conventions (docs/reference/neuron-monitor.md §Report, §Encoding):

* every group object starts with ``period`` (seconds covered, from the daemon's monotonic clock,
  rounded to nanoseconds) and ends with ``error``;
* a process new since the baseline: its device counters count from zero; its CPU times have no
  baseline, so ``neuron_runtime_vcpu_usage`` is left out for it until its next collection
  (functions return None);
* shares become percent here, where the format wants them; CPU percentages are rounded to 2
  decimals the way Go's ``math.Round(x*100)/100`` does; utilization is not rounded.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from neurontools.contract.inventory import HardwareInfo, InstanceIdentity
from neurontools.contract.percent import percent
from neurontools.contract.schema import (
    CORE_MEMORY_KEYS,
    HARDWARE_INFO_KEYS,
    HOST_MEMORY_KEYS,
    INSTANCE_INFO_KEYS,
    K8S_INFO,
    K8S_INFO_KEYS,
    MEMORY_INFO,
    NEURON_HW_COUNTERS,
    PERCENTILES,
    PROCESS_CPU_FIELDS,
    SUBGRAPH_DEVICE_MEMORY_KEYS,
    VCPU_FIELDS,
    VCPU_USAGE,
)
from neurontools.contract.snapshot_models import LoadedModel, ProcessSnapshot, Snapshot
from neurontools.report import k8s
from neurontools.report.period import Period, ProcessPeriod

Group = dict[str, Any]


# -- arithmetic -----------------------------------------------------------------------------------


def period_value(seconds: float) -> float:
    """The ``period`` field: seconds rounded to nanoseconds."""
    return round(seconds, 9)


def go_round2(value: float) -> float:
    """``math.Round(value*100)/100`` as Go computes it (halves away from zero)."""
    scaled = value * 100
    whole: float = math.trunc(scaled)
    if abs(scaled - whole) >= 0.5:
        whole += math.copysign(1.0, scaled)
    return whole / 100


def percentiles(values: Iterable[float]) -> dict[str, float] | None:
    """Nearest-rank percentiles in the report's key order; None when there is no value."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return None
    return {key: ordered[max(math.ceil(p * n / 100), 1) - 1] for key, p in PERCENTILES}


def _envelope(period: float, body: Mapping[str, Any], error: str = "") -> Group:
    return {"period": period_value(period), **body, "error": error}


# -- application-level groups ---------------------------------------------------------------------


def neuroncore_counters(process: ProcessPeriod) -> Group:
    """Utilization (percent, not rounded) and FLOP/s (truncated) of every core the process owns."""
    seconds = process.seconds
    in_use: dict[str, Any] = {}
    for core, work in process.cores.items():
        if seconds > 0:
            utilization, rate = percent(work.utilization), int(work.flops / seconds)
        else:
            utilization, rate = 0.0, 0
        in_use[str(core)] = {"neuroncore_utilization": float(utilization), "flops": rate}
    return _envelope(seconds, {"neuroncores_in_use": in_use})


def execution_stats(process: ProcessPeriod, since: float, until: float) -> Group:
    """Executions and errors during the period, latency percentiles of executions that ended in
    ``(since, until]`` (the period, on the daemon's monotonic clock)."""
    counts = process.counts
    finished = process.latencies(since, until)
    latency = {
        "total_latency": percentiles(lat.total for lat in finished),
        "device_latency": percentiles(lat.device for lat in finished),
    }
    body = {
        "error_summary": dict(counts.errors),
        "execution_summary": dict(counts.executions),
        "latency_stats": latency,
    }
    return _envelope(process.seconds, body)


def _loaded_model(model: LoadedModel) -> dict[str, Any]:
    subgraphs = {}
    for name in sorted(model.subgraphs):  # a Go map: keys sorted
        sg = model.subgraphs[name]
        subgraphs[name] = {
            "memory_used_bytes": {
                "host": sg.host,
                "neuron_device": sg.neuron_device,
                "usage_breakdown": {
                    "host": {k: getattr(sg.host_breakdown, k) for k in HOST_MEMORY_KEYS},
                    "neuron_device": {k: getattr(sg.device_breakdown, k) for k in SUBGRAPH_DEVICE_MEMORY_KEYS},
                },
            },
            "neuroncore_index": sg.neuroncore_index,
            "neuron_device_index": sg.neuron_device_index,
        }
    return {
        "name": model.name,
        "uuid": model.uuid,
        "model_id": model.model_id,
        "is_running": model.is_running,
        "subgraphs": subgraphs,
    }


# ``memory_used`` without its period: (neuron_runtime_used_bytes, loaded_models)
MemoryParts = tuple[dict[str, Any], list[dict[str, Any]]]


def memory_parts(cur: ProcessSnapshot) -> MemoryParts:
    """What ``memory_used`` reports of ``cur``: totals are the sums of their categories."""
    mem = cur.memory
    per_core = {
        str(core): {k: getattr(usage, k) for k in CORE_MEMORY_KEYS} for core, usage in sorted(mem.cores.items())
    }
    used = {
        "host": mem.host.total,
        "neuron_device": sum(usage.total for usage in mem.cores.values()),
        "usage_breakdown": {
            "host": {k: getattr(mem.host, k) for k in HOST_MEMORY_KEYS},
            "neuroncore_memory_usage": per_core,
        },
    }
    return used, [_loaded_model(m) for m in cur.loaded_models]


def memory_used(cur: ProcessSnapshot, seconds: float, parts: MemoryParts | None = None) -> Group:
    """Current memory of the process (gauges). ``parts``: ``memory_parts(cur)`` when the caller
    has it already (the report builder keeps it while the memory does not change)."""
    used, models = parts if parts is not None else memory_parts(cur)
    return _envelope(seconds, {"neuron_runtime_used_bytes": used, "loaded_models": models})


def runtime_vcpu_usage(process: ProcessPeriod) -> Group | None:
    """CPU time of the process during the period, in percent of one vCPU (rounded to 2 decimals).

    Unreadable CPU times give zeros and the daemon's ``cpu_error``; no baseline gives None.
    """
    cur = process.proc
    if cur.cpu is None:
        error = cur.cpu_error or f"CPU times of process {cur.pid} are not readable"
        return _envelope(process.seconds, {"vcpu_usage": dict.fromkeys(PROCESS_CPU_FIELDS, 0.0)}, error)
    if process.cpu_seconds is None:
        return None
    usage = {}
    for k in PROCESS_CPU_FIELDS:
        share = process.cpu_share(k)
        usage[k] = go_round2(percent(share)) if share is not None and process.seconds > 0 else 0.0
    return _envelope(process.seconds, {"vcpu_usage": usage})


# -- system-level groups --------------------------------------------------------------------------


def memory_info(cur: Snapshot, seconds: float) -> Group:
    mem = cur.host.memory
    return _envelope(
        seconds,
        {
            "memory_total_bytes": mem.total,
            "memory_used_bytes": mem.used,
            "swap_total_bytes": mem.swap_total,
            "swap_used_bytes": mem.swap_used,
        },
    )


def vcpu_usage(period: Period) -> Group:
    """Per-vCPU shares of time by state (sum ~100) and their mean, context switches during the period.

    A vCPU without elapsed time (or new since the baseline) shows zeros and is left out of the mean.
    """
    usage_data = {
        str(i): {k: go_round2(percent(shares[k])) if shares is not None else 0.0 for k in VCPU_FIELDS}
        for i, shares in enumerate(period.vcpu_shares)
    }
    mean = period.vcpu_mean_shares
    average = {k: go_round2(percent(mean[k])) if mean is not None else 0.0 for k in VCPU_FIELDS}
    body = {"average_usage": average, "usage_data": usage_data, "context_switch_count": period.context_switches}
    return _envelope(period.seconds, body)


def neuron_hw_counters(period: Period) -> Group:
    """ECC events per device during the period, devices in index order."""
    devices = [{"neuron_device_index": index, **events} for index, events in period.ecc.items()]
    return _envelope(period.seconds, {"neuron_devices": devices})


def neuron_k8s_info(cur: Snapshot, seconds: float) -> Group:
    """The pods holding NeuronCores and devices now (``report.k8s``), keyed by index in index order."""
    cores = {str(core): use.to_dict() for core, use in k8s.core_uses(cur).items()}
    devices = {str(device): use.to_dict() for device, use in k8s.device_uses(cur).items()}
    return _envelope(seconds, dict(zip(K8S_INFO_KEYS, (cores, devices), strict=True)))


def unavailable_system_group(group: str, error: str) -> Group:
    """A system group that could not be collected: zero values (as Go writes an empty struct) and the error."""
    if group == MEMORY_INFO:
        body: dict[str, Any] = dict.fromkeys(
            ("memory_total_bytes", "memory_used_bytes", "swap_total_bytes", "swap_used_bytes"), 0
        )
    elif group == VCPU_USAGE:
        body = {"average_usage": dict.fromkeys(VCPU_FIELDS, 0.0), "usage_data": {}, "context_switch_count": 0}
    elif group == NEURON_HW_COUNTERS:
        body = {"neuron_devices": []}
    elif group == K8S_INFO:
        body = {key: {} for key in K8S_INFO_KEYS}
    else:
        raise ValueError(f"not a system-level group: {group!r}")
    return _envelope(0.0, body, error)


# -- always-present objects -----------------------------------------------------------------------


def instance_info(instance: InstanceIdentity | None, error: str = "") -> dict[str, Any]:
    values = instance.to_dict() if instance is not None else {}
    return {**{k: values.get(k, "") for k in INSTANCE_INFO_KEYS}, "error": error}


def hardware_info(hardware: HardwareInfo | None, error: str = "") -> dict[str, Any]:
    """``neuron_hardware_info``; without hardware (driver/daemon gone) zero values and the error."""
    values = hardware.to_dict() if hardware is not None else {}
    body = {k: values.get(k, "" if kind is str else 0) for k, kind in HARDWARE_INFO_KEYS}
    return {**body, "error": error}
