"""The official ``neuron-monitor-prometheus.py``'s metric families, written once: names, types, HELP
texts, scopes and labels (docs/reference/neuron-monitor-prometheus.md §Metrics), read by the
collector (``compat.py``), its report readers (``compat_groups.py``) and the tests."""

from __future__ import annotations

from dataclasses import dataclass

from neurontools.contract.names import CORE_MEMORY_KEYS

APP = "app"  # per Neuron runtime process: instance labels + runtime_tag + the family's labels
SYSTEM = "system"  # per host: instance labels + the family's labels
INFO = "info"  # constant 1.0, created once

# (label, instance_info key) of the instance labels, in the official order; ultraserver_id only when present.
INSTANCE_LABELS: tuple[tuple[str, str], ...] = (
    ("instance_name", "instance_name"),
    ("instance_id", "instance_id"),
    ("instance_type", "instance_type"),
    ("availability_zone", "instance_availability_zone"),
    ("region", "instance_region"),
    ("subnet_id", "subnet_id"),
)
OPTIONAL_INSTANCE_LABELS: tuple[tuple[str, str], ...] = (("ultraserver_id", "ultraserver_id"),)

VCPU_AGGREGATES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("user", ("user", "nice")),
    ("system", ("system", "io_wait", "irq", "soft_irq")),
)
HARDWARE_INFO_LABELS = ("neuron_device_count", "neuroncore_per_device_count")
OPTIONAL_HARDWARE_INFO_LABELS = ("neuron_device_memory_size",)


@dataclass(frozen=True)
class CompatFamily:
    name: str  # as exposed (counters end in _total, info gauges in _info)
    kind: str  # "gauge" | "counter" | "info"
    help: str
    scope: str  # APP | SYSTEM | INFO
    labels: tuple[str, ...] = ()  # labels after the instance labels (and runtime_tag)
    source: str = ""  # report path the value comes from


def _core_memory(kind: str) -> CompatFamily:
    return CompatFamily(
        f"neuroncore_memory_usage_{kind}",
        "gauge",
        f"NeuronCore memory utilization for {kind}",
        APP,
        ("memory_location", "neuroncore"),
        f"memory_used.neuron_runtime_used_bytes.usage_breakdown.neuroncore_memory_usage[nc].{kind}",
    )


def _system_memory(prefix: str, stat: str) -> CompatFamily:
    return CompatFamily(
        f"system_{prefix}_{stat}", "gauge", f"System {prefix} {stat} bytes", SYSTEM, (), f"memory_info.{prefix}_{stat}"
    )


# Every family of docs/reference/neuron-monitor-prometheus.md §Metrics, written once (collector, describe(), tests).
FAMILIES: tuple[CompatFamily, ...] = (
    CompatFamily(
        "neuroncore_utilization_ratio",
        "gauge",
        "NeuronCore utilization ratio",
        APP,
        ("neuroncore",),
        "neuroncore_counters.neuroncores_in_use[nc].neuroncore_utilization / 100",
    ),
    CompatFamily(
        "neuron_runtime_vcpu_usage_ratio",
        "gauge",
        "Runtime vCPU utilization ratio",
        APP,
        ("usage_type",),
        "neuron_runtime_vcpu_usage.vcpu_usage.{user,system} / 100",
    ),
    CompatFamily(
        "neuron_runtime_memory_used_bytes",
        "gauge",
        "Runtime memory used bytes",
        APP,
        ("memory_location",),
        "memory_used.neuron_runtime_used_bytes.{host,neuron_device}",
    ),
    *(_core_memory(kind) for kind in CORE_MEMORY_KEYS),
    CompatFamily(
        "execution_errors_total",
        "counter",
        "Execution errors total",
        APP,
        ("error_type",),
        "execution_stats.error_summary[error_type], summed over reports",
    ),
    CompatFamily(
        "execution_status_total",
        "counter",
        "Execution status total",
        APP,
        ("status_type",),
        "execution_stats.execution_summary[status_type], summed over reports",
    ),
    CompatFamily(
        "execution_latency_seconds",
        "gauge",
        "Execution latency in seconds",
        APP,
        ("percentile",),
        "execution_stats.latency_stats.total_latency[percentile]",
    ),
    CompatFamily(
        "hardware_ecc_events_total",
        "counter",
        "Hardware ecc events total",
        SYSTEM,
        ("event_type", "neuron_device_index"),
        "neuron_hw_counters.neuron_devices[][event_type], summed over reports",
    ),
    CompatFamily("system_vcpu_count", "gauge", "System vCPU count", SYSTEM, (), "len(vcpu_usage.usage_data)"),
    CompatFamily(
        "system_vcpu_usage_ratio",
        "gauge",
        "System CPU utilization ratio",
        SYSTEM,
        ("usage_type",),
        "vcpu_usage.average_usage: min(user+nice, 100) / 100, min(system+io_wait+irq+soft_irq, 100) / 100",
    ),
    *(_system_memory(prefix, stat) for prefix in ("memory", "swap") for stat in ("total_bytes", "used_bytes")),
    CompatFamily("instance_info", "info", "EC2 instance information", INFO, (), "instance_info (first report)"),
    CompatFamily(
        "neuron_hardware_info",
        "info",
        "Neuron Hardware Information",
        INFO,
        (*HARDWARE_INFO_LABELS, *OPTIONAL_HARDWARE_INFO_LABELS),
        "neuron_hardware_info (first report without error)",
    ),
)
FAMILY_BY_NAME: dict[str, CompatFamily] = {family.name: family for family in FAMILIES}

# --enable-k8s-info: the per-core families and the labels they gain (dcgm-exporter's names)
K8S_FAMILIES = frozenset(
    {"neuroncore_utilization_ratio", *(f"neuroncore_memory_usage_{kind}" for kind in CORE_MEMORY_KEYS)}
)
K8S_LABELS = ("pod", "namespace", "container")
NO_POD: tuple[str, str, str] = ("", "", "")

LabelValues = tuple[str, ...]
