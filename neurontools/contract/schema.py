"""Names and key orders of the neuron-monitor report (docs/reference/neuron-monitor.md), written once.

The report builder emits keys in exactly these orders, the encoder keeps insertion order, so the
bytes on the wire match the real tool's struct order. Group tables carry a one-line description
for help texts and validation messages.
"""

from __future__ import annotations

# Engine, memory category and ECC event names are written once, in report.names; their key
# orders are re-exported here with the report's other key orders.
from neurontools.contract.names import CORE_MEMORY_KEYS as CORE_MEMORY_KEYS
from neurontools.contract.names import ECC_EVENTS as ECC_EVENTS
from neurontools.contract.names import ENGINE_KEYS as ENGINE_KEYS
from neurontools.contract.names import HOST_MEMORY_KEYS as HOST_MEMORY_KEYS
from neurontools.contract.names import HW_COUNTER_KEYS as HW_COUNTER_KEYS
from neurontools.contract.names import SUBGRAPH_DEVICE_MEMORY_KEYS as SUBGRAPH_DEVICE_MEMORY_KEYS

# -- metric groups --------------------------------------------------------------------------------

NEURONCORE_COUNTERS = "neuroncore_counters"
EXECUTION_STATS = "execution_stats"
MEMORY_USED = "memory_used"
NEURON_RUNTIME_VCPU_USAGE = "neuron_runtime_vcpu_usage"
VCPU_USAGE = "vcpu_usage"
MEMORY_INFO = "memory_info"
NEURON_HW_COUNTERS = "neuron_hw_counters"

# Application-level groups (collected per Neuron runtime process), in the report's (alphabetical) order.
APP_GROUPS: dict[str, str] = {
    EXECUTION_STATS: "execution counts by outcome, errors by kind, latency percentiles",
    MEMORY_USED: "host and device memory used by the application, by category, and its loaded models",
    NEURON_RUNTIME_VCPU_USAGE: "CPU time of the application process (user, system)",
    NEURONCORE_COUNTERS: "utilization and FLOP/s of every NeuronCore the application owns",
}

# System-level groups, in the report's (alphabetical) order.
SYSTEM_GROUPS: dict[str, str] = {
    MEMORY_INFO: "host RAM and swap",
    NEURON_HW_COUNTERS: "ECC events per Neuron device",
    VCPU_USAGE: "per-vCPU and average CPU usage, context switches",
}

# Kubernetes pods holding the NeuronCores (2.23+): enabled by listing the system metric type
# ``k8s_info`` (our reading of "enabled if k8s_info is enabled": docs/kubernetes.md), written as
# the report's top-level ``neuron_k8s_info`` object rather than inside ``system_data``.
K8S_INFO = "k8s_info"
NEURON_K8S_INFO = "neuron_k8s_info"
K8S_INFO_KEYS = ("neuroncores_k8s_info", "neurondevices_k8s_info")
# System metric types outside system_data: config type -> the report's top-level key.
TOP_LEVEL_GROUPS: dict[str, str] = {K8S_INFO: NEURON_K8S_INFO}
# Every type a configuration's ``system_metrics`` may list.
SYSTEM_METRIC_TYPES: dict[str, str] = {
    **SYSTEM_GROUPS,
    K8S_INFO: "Kubernetes pod, namespace and containers holding each NeuronCore and device (neuron_k8s_info)",
}

# Groups that report gauges (current values): they can be reported from a single snapshot.
# All other groups are rates or per-period counts and need two snapshots.
GAUGE_GROUPS = frozenset({MEMORY_USED, MEMORY_INFO, K8S_INFO})

# Group names of older tools, rejected in configuration files with a pointer to the new name.
RENAMED_GROUPS: dict[str, tuple[str, str]] = {"inference_stats": (EXECUTION_STATS, "Neuron 2.5")}

# Without -c: every application group for every Neuron process, plus vcpu_usage and memory_info
# (docs/reference/neuron-monitor.md §Command line).
DEFAULT_APP_GROUPS = tuple(APP_GROUPS)
DEFAULT_SYSTEM_GROUPS = (VCPU_USAGE, MEMORY_INFO)

# -- key orders inside groups ---------------------------------------------------------------------

ERROR_SUMMARY_KEYS = ("generic", "numerical", "transient", "model", "runtime", "hardware")
EXECUTION_SUMMARY_KEYS = (
    "completed",
    "completed_with_err",
    "completed_with_num_err",
    "timed_out",
    "incorrect_input",
    "failed_to_queue",
)
# Latency percentiles: (key, percent), keys in the lexical order the real tool writes them.
PERCENTILES: tuple[tuple[str, float], ...] = (
    ("p0", 0.0),
    ("p1", 1.0),
    ("p100", 100.0),
    ("p25", 25.0),
    ("p50", 50.0),
    ("p75", 75.0),
    ("p99", 99.0),
)
LATENCY_KINDS = ("total_latency", "device_latency")


VCPU_FIELDS = ("user", "nice", "system", "idle", "io_wait", "irq", "soft_irq")
PROCESS_CPU_FIELDS = ("user", "system")

INSTANCE_INFO_KEYS = (
    "instance_name",
    "instance_id",
    "instance_type",
    "instance_availability_zone",
    "instance_availability_zone_id",
    "instance_region",
    "ami_id",
    "subnet_id",
)
HARDWARE_INFO_KEYS: tuple[tuple[str, type], ...] = (
    ("neuron_device_type", str),
    ("neuron_device_version", str),
    ("neuroncore_version", str),
    ("neuron_device_count", int),
    ("neuron_device_memory_size", int),
    ("neuroncore_per_device_count", int),
    ("logical_neuroncore_config", int),
)

# Top-level keys in struct order (then ``neuron_k8s_info`` when enabled).
REPORT_KEYS = ("neuron_runtime_data", "system_data", "instance_info", "neuron_hardware_info")
RUNTIME_ENTRY_KEYS = ("pid", "neuron_runtime_tag", "error", "report")
