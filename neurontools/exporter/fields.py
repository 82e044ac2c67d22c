"""The extended metric families of ``neuron-exporter``: one table drives the exposition, the
REST schema's descriptions and the dashboards (glances' ``fields_description`` idea).

Naming follows Prometheus' rules: base units (seconds, bytes), ``_total`` for counters,
``_ratio`` for 0-1 values, bounded labels only (per-process labels are opt-in with
``--per-process``). Instance identity is attached once, by ``neuron_instance_info``; the scrape's
``instance`` label tells nodes apart. Source of every value: the daemon snapshot
(docs/snapshot.md); rates are left to PromQL (``rate(...[1m])``) wherever a counter exists.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    name: str
    kind: str  # "counter" | "gauge" | "histogram" | "info"
    help: str
    labels: tuple[str, ...]
    unit: str = ""  # base unit the name ends with ("seconds", "bytes", "ratio", "flops"), if any


ENGINE_LABEL_VALUES = ("tensor", "vector", "scalar", "gpsimd", "dma")
HBM_CATEGORIES = ("constants", "model_code", "model_shared_scratchpad", "runtime_memory", "tensors")
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

FAMILIES: tuple[Family, ...] = (
    Family(
        "neuron_instance_info",
        "info",
        "Emulated or real EC2 instance identity (value 1)",
        ("instance_id", "instance_type", "availability_zone", "region", "neuron_device_type", "neuroncore_version"),
    ),
    Family(
        "neuroncore_busy_seconds_total",
        "counter",
        "NeuronCore busy time (simulated device seconds)",
        ("neuron_device", "neuroncore"),
        "seconds",
    ),
    Family(
        "neuroncore_engine_busy_seconds_total",
        "counter",
        "Busy time per NeuronCore engine",
        ("neuron_device", "neuroncore", "engine"),
        "seconds",
    ),
    Family(
        "neuroncore_engine_utilization_ratio",
        "gauge",
        "Busy share of each engine over the exporter's last collection period (0-1)",
        ("neuron_device", "neuroncore", "engine"),
        "ratio",
    ),
    Family("neuroncore_flops_total", "counter", "Floating-point operations executed", ("neuron_device", "neuroncore")),
    Family(
        "neuroncore_in_use", "gauge", "1 when a process owns the NeuronCore, else 0", ("neuron_device", "neuroncore")
    ),
    Family(
        "neurondevice_hbm_used_bytes", "gauge", "Device HBM in use by category", ("neuron_device", "category"), "bytes"
    ),
    Family("neurondevice_hbm_total_bytes", "gauge", "Device HBM capacity", ("neuron_device",), "bytes"),
    Family("neuron_executions_total", "counter", "Step graph executions by outcome", ("outcome",)),
    Family("neuron_execution_errors_total", "counter", "Execution errors by kind", ("error_type",)),
    Family(
        "neuron_execution_latency_seconds", "histogram", "Total execution latency as seen by the runtime", (), "seconds"
    ),
    Family("neuron_compile_cache_hits_total", "counter", "Step graphs found in a compile cache", ()),
    Family("neuron_compile_cache_misses_total", "counter", "Step graphs compiled", ()),
    Family(
        "neuron_collective_bytes_total", "counter", "Collective payload bytes by link type", ("link_type",), "bytes"
    ),
    Family("neuron_collective_operations_total", "counter", "Collective operations by link type", ("link_type",)),
    Family("neuron_runtime_processes", "gauge", "Neuron runtime processes attached", ()),
    Family("neuron_ecc_events_total", "counter", "Hardware ECC events by type", ("neuron_device", "event_type")),
    Family("neuron_host_cpu_seconds_total", "counter", "Host CPU time by mode (the real host)", ("mode",), "seconds"),
    Family("neuron_host_memory_used_bytes", "gauge", "Host memory in use (the real host)", (), "bytes"),
    Family("neuron_host_memory_total_bytes", "gauge", "Host memory size (the real host)", (), "bytes"),
    Family("neuron_exporter_build_info", "info", "neuron-exporter build (value 1)", ("version",)),
    Family("neuron_exporter_source_up", "gauge", "1 if the last collection from the source succeeded", ("source",)),
    Family("neuron_exporter_collection_duration_seconds", "gauge", "Duration of the last collection", (), "seconds"),
    Family(
        "neuron_exporter_last_collection_timestamp_seconds",
        "gauge",
        "Unix time of the last successful collection",
        (),
        "seconds",
    ),
)
# Per-process series (only with --per-process): labels pid and runtime_tag added.
PER_PROCESS_FAMILIES: tuple[Family, ...] = (
    Family(
        "neuron_process_neuroncore_busy_seconds_total",
        "counter",
        "NeuronCore busy time per process",
        ("pid", "runtime_tag", "neuroncore"),
        "seconds",
    ),
    Family(
        "neuron_process_hbm_used_bytes",
        "gauge",
        "Device HBM held per process and category",
        ("pid", "runtime_tag", "neuroncore", "category"),
        "bytes",
    ),
)
BY_NAME = {f.name: f for f in FAMILIES + PER_PROCESS_FAMILIES}
