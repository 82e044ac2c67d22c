"""Reading neuron-monitor reports for the compatible metrics (``compat.py``): each group's data
becomes a ``Batch`` of changes, applied only when the whole group was read; malformed data raises
``InvalidGroup`` (the group is skipped with a message). Also the report's instance labels and,
for ``--enable-k8s-info``, the pod holding each core."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from neurontools.contract.json_values import describe, is_number, is_object
from neurontools.contract.names import CORE_MEMORY_KEYS, ECC_EVENTS
from neurontools.contract.percent import share
from neurontools.exporter.compat_families import (
    INSTANCE_LABELS,
    NO_POD,
    OPTIONAL_INSTANCE_LABELS,
    VCPU_AGGREGATES,
    LabelValues,
)


class InvalidGroup(Exception):
    """A group's data does not have the report's shape."""


def as_number(value: Any) -> float:
    if not is_number(value):
        raise InvalidGroup(f"expected a number, got {describe(value)}")
    return float(value)


def as_count(value: Any) -> float:
    amount = as_number(value)
    if not math.isfinite(amount) or amount < 0:
        raise InvalidGroup(f"expected a non-negative count, got {value!r}")
    return amount


def core_index(key: Any) -> str:
    """A core index as the official script labels it (``int(key)``, printed in decimal)."""
    try:
        return str(int(key))
    except (TypeError, ValueError):
        raise InvalidGroup(f"expected an integer index, got {key!r}") from None


def label_text(value: Any) -> str:
    """A label value: ``str(value)`` with what UTF-8 cannot carry (lone surrogates, which a
    report's JSON may hold as ``\\udXXX`` escapes) replaced, so a scrape always encodes
    (docs/fuzzing.md)."""
    text = str(value)
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


def as_mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not is_object(value):
        raise InvalidGroup(f"{what} is not an object")
    return value


def reason(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"missing key {exc.args[0]!r}"
    return str(exc)



class Batch:
    """The changes one group asks for; applied only when the whole group was read. ``pods``
    (``k8s_info``): core index -> (pod, namespace, container) for the per-core families."""

    def __init__(self, base: LabelValues, pods: Mapping[str, LabelValues] | None = None) -> None:
        self.base = base
        self.pods = pods
        self.ops: list[tuple[str, str, LabelValues, float]] = []

    def pod(self, core: str) -> LabelValues:
        """The pod labels of a per-core series (none without ``k8s_info``)."""
        return () if self.pods is None else self.pods.get(core, NO_POD)

    def declare(self, name: str) -> None:
        self.ops.append(("declare", name, (), 0.0))

    def set(self, name: str, labels: LabelValues, value: float) -> None:
        self.ops.append(("set", name, self.base + labels, value))

    def inc(self, name: str, labels: LabelValues, amount: float) -> None:
        self.ops.append(("inc", name, self.base + labels, amount))


# -- group handlers: report data -> batch ---------------------------------------------------------


def _neuroncore_counters(batch: Batch, data: Mapping[str, Any]) -> None:
    batch.declare("neuroncore_utilization_ratio")
    for core, values in as_mapping(data["neuroncores_in_use"], "neuroncores_in_use").items():
        ratio = share(as_number(as_mapping(values, f"core {core}")["neuroncore_utilization"]))
        index = core_index(core)
        batch.set("neuroncore_utilization_ratio", (index, *batch.pod(index)), ratio)


def _neuron_runtime_vcpu_usage(batch: Batch, data: Mapping[str, Any]) -> None:
    batch.declare("neuron_runtime_vcpu_usage_ratio")
    usage = as_mapping(data["vcpu_usage"], "vcpu_usage")
    for usage_type in ("user", "system"):
        batch.set("neuron_runtime_vcpu_usage_ratio", (usage_type,), share(as_number(usage[usage_type])))


def _memory_used(batch: Batch, data: Mapping[str, Any]) -> None:
    used = as_mapping(data["neuron_runtime_used_bytes"], "neuron_runtime_used_bytes")
    batch.declare("neuron_runtime_memory_used_bytes")
    for location in ("host", "neuron_device"):
        batch.set("neuron_runtime_memory_used_bytes", (location,), as_number(used[location]))
    if "usage_breakdown" not in used:  # pre-2.5 report: totals only
        return
    cores = as_mapping(as_mapping(used["usage_breakdown"], "usage_breakdown")["neuroncore_memory_usage"], "cores")
    for kind in CORE_MEMORY_KEYS:
        name = f"neuroncore_memory_usage_{kind}"
        batch.declare(name)
        for core, usage in cores.items():
            index = core_index(core)
            batch.set(name, ("None", index, *batch.pod(index)), as_number(as_mapping(usage, f"core {core}")[kind]))


def _execution_stats(batch: Batch, data: Mapping[str, Any]) -> None:
    for name, key in (("execution_errors_total", "error_summary"), ("execution_status_total", "execution_summary")):
        batch.declare(name)
        for kind, count in as_mapping(data[key], key).items():
            batch.inc(name, (label_text(kind),), as_count(count))
    batch.declare("execution_latency_seconds")
    total = as_mapping(data["latency_stats"], "latency_stats")["total_latency"]
    if total is not None:
        for percentile, seconds in as_mapping(total, "total_latency").items():
            batch.set("execution_latency_seconds", (label_text(percentile),), as_number(seconds))


def _neuron_hw_counters(batch: Batch, data: Mapping[str, Any]) -> None:
    batch.declare("hardware_ecc_events_total")
    devices = data["neuron_devices"]
    if not isinstance(devices, list):
        raise InvalidGroup("neuron_devices is not an array")
    for device in devices:
        device = as_mapping(device, "device")
        index = label_text(device["neuron_device_index"])
        for event in ECC_EVENTS:
            if event in device:  # older tools have no sram_ecc_corrected
                batch.inc("hardware_ecc_events_total", (event, index), as_count(device[event]))


def _vcpu_usage(batch: Batch, data: Mapping[str, Any]) -> None:
    batch.declare("system_vcpu_count")
    batch.set("system_vcpu_count", (), float(len(as_mapping(data["usage_data"], "usage_data"))))
    average = as_mapping(data["average_usage"], "average_usage")
    batch.declare("system_vcpu_usage_ratio")
    for usage_type, fields in VCPU_AGGREGATES:
        total = sum(as_number(average[name]) for name in fields)
        batch.set("system_vcpu_usage_ratio", (usage_type,), share(min(total, 100.0)))


def _memory_info(batch: Batch, data: Mapping[str, Any]) -> None:
    for prefix in ("memory", "swap"):
        for stat in ("total_bytes", "used_bytes"):
            name = f"system_{prefix}_{stat}"
            batch.declare(name)
            batch.set(name, (), as_number(data[f"{prefix}_{stat}"]))


Handler = Callable[[Batch, Mapping[str, Any]], None]
APP_HANDLERS: dict[str, Handler] = {
    "execution_stats": _execution_stats,
    "memory_used": _memory_used,
    "neuron_runtime_vcpu_usage": _neuron_runtime_vcpu_usage,
    "neuroncore_counters": _neuroncore_counters,
}
SYSTEM_HANDLERS: dict[str, Handler] = {
    "memory_info": _memory_info,
    "neuron_hw_counters": _neuron_hw_counters,
    "vcpu_usage": _vcpu_usage,
}



def core_pods(info: Any, messages: list[str]) -> dict[str, LabelValues]:
    """Core index -> (pod, namespace, container) from a report's ``neuron_k8s_info`` (absent: none)."""
    if info is None:
        return {}
    try:
        info = as_mapping(info, "neuron_k8s_info")
        if info.get("error", "") != "":
            messages.append(f"Error getting neuron_k8s_info: {info['error']}")
            return {}
        pods: dict[str, LabelValues] = {}
        for core, use in as_mapping(info["neuroncores_k8s_info"], "neuroncores_k8s_info").items():
            use = as_mapping(use, f"core {core}")
            containers = use.get("container_name") or []
            if not isinstance(containers, list):
                raise InvalidGroup(f"core {core}: container_name is not an array")
            pods[core_index(core)] = (
                label_text(use["pod_name"]),
                label_text(use["namespace"]),
                ",".join(label_text(c) for c in containers),
            )
    except (InvalidGroup, KeyError) as exc:
        messages.append(f"Invalid neuron_k8s_info: {reason(exc)}")
        return {}
    return pods


def instance_labels(info: Any) -> dict[str, str]:
    """Instance label values from a report's ``instance_info`` (missing fields: ``""``)."""
    info = info if is_object(info) else {}
    labels = {label: label_text(info.get(key, "")) for label, key in INSTANCE_LABELS}
    labels.update({label: label_text(info[key]) for label, key in OPTIONAL_INSTANCE_LABELS if key in info})
    return labels

