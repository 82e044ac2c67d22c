"""The field table: every quantity the tools publish, described once (glances' ``fields_description``).

Per quantity: its key (the name in a REST response or in ``/api/v1/history``), its unit, a
one-line description, neuron-top's short label where neuron-top shows it, and its Prometheus
family where it has one. The description is also the family's HELP text, so neuron-exporter's
exposition, its REST schema and its history metrics cannot drift apart (docs/architecture.md
§One table of fields). Names of memory categories, engines and ECC events live in
``report.names``.

A rate or a share says which period it covers (``over``): the REST API's and the exposition's
figures cover the last collection period, a history series each of its steps
(``Quantity.text_over(EACH_STEP)``). Ratios are 0-1 and say so.

Keys are unique within what one consumer shows (a REST response, the history metrics); the same
key may mean different things in two responses (``hbm_used_bytes`` of a device and of a core).
Family names are unique across the table. This module imports nothing but ``report.names``:
every tool reads it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from neurontools.contract.names import ENGINES

# -- units ----------------------------------------------------------------------------------------

RATIO = "ratio"  # 0-1
BYTES = "bytes"
SECONDS = "seconds"
FLOPS = "flops"
FLOPS_PER_SECOND = "flops/s"
PERCENT = "percent"  # 0-100 per vCPU
PER_SECOND = "1/s"
NO_UNIT = ""  # a count, a flag, text or a structure

# -- periods a rate or share covers ---------------------------------------------------------------

LAST_PERIOD = "the last collection period"
EXPORTER_PERIOD = "the exporter's last collection period"
EACH_STEP = "each step"

# -- Prometheus family kinds ----------------------------------------------------------------------

COUNTER = "counter"
GAUGE = "gauge"
HISTOGRAM = "histogram"
INFO = "info"


@dataclass(frozen=True)
class Prometheus:
    """Where a quantity is a metric family: its name, type and label names (its HELP text is the
    quantity's description)."""

    name: str
    kind: str  # COUNTER | GAUGE | HISTOGRAM | INFO
    labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class Family:
    """One metric family as the exposition renders it."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...]


@dataclass(frozen=True, eq=False)  # each quantity is itself: compared and hashed by identity
class Quantity:
    key: str
    unit: str
    description: str
    label: str = ""  # neuron-top's label ("": neuron-top does not show it)
    prometheus: Prometheus | None = None
    over: str = ""  # the period a rate or share covers ("": not a rate)

    def text_over(self, period: str) -> str:
        """The description of the figure over ``period`` (the description itself when not a rate)."""
        if not self.over:
            return self.description
        return f"{self.description} over {period}{' (0-1)' if self.unit == RATIO else ''}"

    @property
    def text(self) -> str:
        """The description over the quantity's own period: REST ``description`` and HELP text."""
        return self.text_over(self.over)

    @property
    def family(self) -> Family | None:
        p = self.prometheus
        return Family(p.name, p.kind, self.text, p.labels) if p is not None else None


CORE_LABELS = ("neuron_device", "neuroncore")
PROCESS_LABELS = ("pid", "runtime_tag", "neuroncore")

# -- the instance and the exporter ----------------------------------------------------------------

INSTANCE_INFO = Quantity(
    "instance",
    NO_UNIT,
    "Emulated or real EC2 instance identity (value 1)",
    prometheus=Prometheus(
        "neuron_instance_info",
        INFO,
        ("instance_id", "instance_type", "availability_zone", "region", "neuron_device_type", "neuroncore_version"),
    ),
)
BUILD_INFO = Quantity(
    "build",
    NO_UNIT,
    "neuron-exporter build (value 1)",
    prometheus=Prometheus("neuron_exporter_build_info", INFO, ("version",)),
)
SOURCE_UP = Quantity(
    "source_up",
    NO_UNIT,
    "1 if the last collection from the source succeeded",
    prometheus=Prometheus("neuron_exporter_source_up", GAUGE, ("source",)),
)
SOURCE_ERROR = Quantity("source_error", NO_UNIT, "why the last collection failed ('' when it succeeded)")
COLLECTION_DURATION = Quantity(
    "collection_duration_seconds",
    SECONDS,
    "Duration of the last collection",
    prometheus=Prometheus("neuron_exporter_collection_duration_seconds", GAUGE),
)
LAST_COLLECTION = Quantity(
    "last_collection_timestamp_seconds",
    SECONDS,
    "Unix time of the last successful collection",
    prometheus=Prometheus("neuron_exporter_last_collection_timestamp_seconds", GAUGE),
)
PERIOD_SECONDS = Quantity("period_seconds", SECONDS, "length of the last collection period (null before two)")

# -- NeuronCores ----------------------------------------------------------------------------------

CORE_BUSY_SECONDS = Quantity(
    "busy_seconds_total",
    SECONDS,
    "NeuronCore busy time (simulated device seconds)",
    prometheus=Prometheus("neuroncore_busy_seconds_total", COUNTER, CORE_LABELS),
)
CORE_ENGINE_BUSY_SECONDS = Quantity(
    "engine_busy_seconds_total",
    SECONDS,
    "Busy time per NeuronCore engine",
    prometheus=Prometheus("neuroncore_engine_busy_seconds_total", COUNTER, (*CORE_LABELS, "engine")),
)
CORE_ENGINE_UTILIZATION = Quantity(
    "engine_utilization",
    RATIO,
    "Busy share of each engine",
    prometheus=Prometheus("neuroncore_engine_utilization_ratio", GAUGE, (*CORE_LABELS, "engine")),
    over=EXPORTER_PERIOD,
)
CORE_FLOPS = Quantity(
    "flops_total",
    FLOPS,
    "Floating-point operations executed",
    prometheus=Prometheus("neuroncore_flops_total", COUNTER, CORE_LABELS),
)
CORE_IN_USE = Quantity(
    "in_use",
    NO_UNIT,
    "1 when a process owns the NeuronCore, else 0",
    prometheus=Prometheus("neuroncore_in_use", GAUGE, CORE_LABELS),
)
CORE_OWNER = Quantity("owner", NO_UNIT, "the runtime process owning the NeuronCore, if any")
CORE_UTILIZATION = Quantity("utilization", RATIO, "NeuronCore busy share", over=LAST_PERIOD)
CORE_FLOPS_PER_SECOND = Quantity("flops_per_second", FLOPS_PER_SECOND, "FLOPs executed per second", over=LAST_PERIOD)
CORE_HBM_USED = Quantity("hbm_used_bytes", BYTES, "device memory held on the NeuronCore by category")
CORE_HBM_USED_TOTAL = Quantity("hbm_used_bytes", BYTES, "device memory held on the NeuronCore, all categories")
# One series per engine in the history (``tensor_engine_utilization``, ...).
ENGINE_UTILIZATIONS: tuple[Quantity, ...] = tuple(
    Quantity(f"{e.key}_engine_utilization", RATIO, f"{e.key} engine busy share", over=LAST_PERIOD) for e in ENGINES
)

# -- Neuron devices -------------------------------------------------------------------------------

DEVICE_HBM_USED = Quantity(
    "hbm_used_bytes",
    BYTES,
    "Device HBM in use by category",
    prometheus=Prometheus("neurondevice_hbm_used_bytes", GAUGE, ("neuron_device", "category")),
)
DEVICE_HBM_TOTAL = Quantity(
    "hbm_total_bytes",
    BYTES,
    "Device HBM capacity",
    prometheus=Prometheus("neurondevice_hbm_total_bytes", GAUGE, ("neuron_device",)),
)
# The daemon's counters as they are (they restart with the daemon); the family below accumulates.
DEVICE_ECC_EVENTS = Quantity("ecc_events", NO_UNIT, "cumulative hardware ECC events by type (daemon counters)")
ECC_EVENTS_TOTAL = Quantity(
    "ecc_events_total",
    NO_UNIT,
    "Hardware ECC events by type",
    prometheus=Prometheus("neuron_ecc_events_total", COUNTER, ("neuron_device", "event_type")),
)
DEVICE_BDF = Quantity("bdf", NO_UNIT, "PCI address (from the daemon inventory)")

# -- the node's runtime work ----------------------------------------------------------------------

EXECUTIONS_TOTAL = Quantity(
    "executions_total",
    NO_UNIT,
    "Step graph executions by outcome",
    prometheus=Prometheus("neuron_executions_total", COUNTER, ("outcome",)),
)
EXECUTION_ERRORS_TOTAL = Quantity(
    "execution_errors_total",
    NO_UNIT,
    "Execution errors by kind",
    prometheus=Prometheus("neuron_execution_errors_total", COUNTER, ("error_type",)),
)
EXECUTION_LATENCY = Quantity(
    "execution_latency_seconds",
    SECONDS,
    "Total execution latency as seen by the runtime",
    prometheus=Prometheus("neuron_execution_latency_seconds", HISTOGRAM),
)
COMPILE_CACHE_HITS_TOTAL = Quantity(
    "compile_cache_hits_total",
    NO_UNIT,
    "Step graphs found in a compile cache",
    prometheus=Prometheus("neuron_compile_cache_hits_total", COUNTER),
)
COMPILE_CACHE_MISSES_TOTAL = Quantity(
    "compile_cache_misses_total",
    NO_UNIT,
    "Step graphs compiled",
    prometheus=Prometheus("neuron_compile_cache_misses_total", COUNTER),
)
COLLECTIVE_BYTES_TOTAL = Quantity(
    "collective_bytes_total",
    BYTES,
    "Collective payload bytes by link type",
    prometheus=Prometheus("neuron_collective_bytes_total", COUNTER, ("link_type",)),
)
COLLECTIVE_OPERATIONS_TOTAL = Quantity(
    "collective_operations_total",
    NO_UNIT,
    "Collective operations by link type",
    prometheus=Prometheus("neuron_collective_operations_total", COUNTER, ("link_type",)),
)
COLLECTIVE_SECONDS_TOTAL = Quantity(
    "collective_seconds_total",
    SECONDS,
    "Simulated time of collectives by link type (on EFA when they span nodes)",
    prometheus=Prometheus("neuron_collective_seconds_total", COUNTER, ("link_type",)),
)
# -- training jobs on the node (docs/multinode.md): the daemon's counters as they are -------------
JOB_STEPS_TOTAL = Quantity(
    "job_steps_total",
    NO_UNIT,
    "Training steps of the job completed by this node's ranks",
    prometheus=Prometheus("neuron_job_steps_total", COUNTER, ("job_id",)),
)
JOB_STEP_SECONDS_TOTAL = Quantity(
    "job_step_seconds_total",
    SECONDS,
    "This node's own time for the job's steps, without waiting for other nodes",
    prometheus=Prometheus("neuron_job_step_seconds_total", COUNTER, ("job_id",)),
)
JOB_SAMPLES_TOTAL = Quantity(
    "job_samples_total",
    NO_UNIT,
    "Sequences the whole job trained in the steps this node completed",
    prometheus=Prometheus("neuron_job_samples_total", COUNTER, ("job_id",)),
)
COLLECTIVE_WAIT_SECONDS_TOTAL = Quantity(
    "collective_wait_seconds_total",
    SECONDS,
    "Time this node waited in collectives for slower nodes (its step time plus this is the job's)",
    prometheus=Prometheus("neuron_collective_wait_seconds_total", COUNTER, ("job_id",)),
)
EFA_BANDWIDTH_FACTOR = Quantity(
    "efa_bandwidth_factor",
    RATIO,
    "EFA bandwidth factor of the node (1 healthy; lower under 'neuron-emulator fault efa')",
    prometheus=Prometheus("neuron_efa_bandwidth_factor", GAUGE),
)
RUNTIME_PROCESSES = Quantity(
    "runtime_processes",
    NO_UNIT,
    "Neuron runtime processes attached",
    prometheus=Prometheus("neuron_runtime_processes", GAUGE),
)

# -- processes ------------------------------------------------------------------------------------

PROCESS_KIND = Quantity("kind", NO_UNIT, "'runtime' (a Neuron runtime process owning NeuronCores)")
PROCESS_EXECUTIONS = Quantity("executions", NO_UNIT, "cumulative executions by outcome")
PROCESS_ERRORS = Quantity("errors", NO_UNIT, "cumulative execution errors by kind")
PROCESS_COMPILE_CACHE = Quantity("compile_cache", NO_UNIT, "cumulative hits and misses")
PROCESS_HBM_USED = Quantity("hbm_used_bytes", BYTES, "device memory by NeuronCore (key) and category")
PROCESS_CORE_UTILIZATION = Quantity(
    "neuroncore_utilization", RATIO, "busy share of each owned NeuronCore", over=LAST_PERIOD
)
PROCESS_CORE_BUSY_SECONDS = Quantity(
    "neuroncore_busy_seconds_total",
    SECONDS,
    "NeuronCore busy time per process",
    prometheus=Prometheus("neuron_process_neuroncore_busy_seconds_total", COUNTER, PROCESS_LABELS),
)
PROCESS_HBM_HELD = Quantity(
    "hbm_used_bytes",
    BYTES,
    "Device HBM held per process and category",
    prometheus=Prometheus("neuron_process_hbm_used_bytes", GAUGE, (*PROCESS_LABELS, "category")),
)
# neuron-top's process panel columns
STEPS_PER_SECOND = Quantity(
    "steps_per_second", PER_SECOND, "executions finished per second over the report's period", label="Steps/s"
)
COMPILE_CACHE_HITS = Quantity(
    "compile_hits", NO_UNIT, "step graphs the process found in a compile cache (cumulative)", label="Cache hits"
)

# -- the host -------------------------------------------------------------------------------------

HOST_CPU_SECONDS = Quantity(
    "host_cpu_seconds_total",
    SECONDS,
    "Host CPU time by mode (the real host)",
    prometheus=Prometheus("neuron_host_cpu_seconds_total", COUNTER, ("mode",)),
)
HOST_MEMORY_USED = Quantity(
    "host_memory_used_bytes",
    BYTES,
    "Host memory in use (the real host)",
    prometheus=Prometheus("neuron_host_memory_used_bytes", GAUGE),
)
HOST_MEMORY_TOTAL = Quantity(
    "host_memory_total_bytes",
    BYTES,
    "Host memory size (the real host)",
    prometheus=Prometheus("neuron_host_memory_total_bytes", GAUGE),
)
HOST_CPU_UTILIZATION = Quantity("host_cpu_utilization", RATIO, "host CPU busy share (all vCPUs)", over=LAST_PERIOD)
HOST_MEMORY_IN_USE = Quantity("host_memory_used_bytes", BYTES, "host memory in use")
# neuron-top's vCPU rows (user and system percent)
SYSTEM_VCPU = Quantity(
    "system_vcpu", PERCENT, "user and system CPU use of the host, averaged over its vCPUs", label="System vCPU Usage"
)
RUNTIME_VCPU = Quantity(
    "runtime_vcpu", PERCENT, "user and system CPU use of the selected applications", label="Runtime vCPU Usage"
)

# -- neuron-top's Memory Usage Summary (one item per category of report.names, then a total) ------

APP_HOST_MEMORY = Quantity(
    "host_memory", BYTES, "host memory used by the selected applications, by category", label="Host Used Memory"
)
APP_DEVICE_MEMORY = Quantity(
    "device_memory", BYTES, "device memory used by the selected applications, by category", label="Device Used Memory"
)
MEMORY_TOTAL = Quantity("total", BYTES, "the sum over every category", label="Total")

# -- the history API's responses ------------------------------------------------------------------

HISTORY_POINTS = Quantity("points", NO_UNIT, "[unix time, value], oldest first")
HISTORY_STEP = Quantity("step_seconds", SECONDS, "spacing of the points (the collection interval, at least 1 s)")
HISTORY_CAPACITY = Quantity("capacity", NO_UNIT, "points kept per series (older ones are dropped)")

# -- what each consumer shows, in its order -------------------------------------------------------

# neuron-exporter's extended families, in exposition order.
EXTENDED_METRICS: tuple[Quantity, ...] = (
    INSTANCE_INFO,
    CORE_BUSY_SECONDS,
    CORE_ENGINE_BUSY_SECONDS,
    CORE_ENGINE_UTILIZATION,
    CORE_FLOPS,
    CORE_IN_USE,
    DEVICE_HBM_USED,
    DEVICE_HBM_TOTAL,
    EXECUTIONS_TOTAL,
    EXECUTION_ERRORS_TOTAL,
    EXECUTION_LATENCY,
    COMPILE_CACHE_HITS_TOTAL,
    COMPILE_CACHE_MISSES_TOTAL,
    COLLECTIVE_BYTES_TOTAL,
    COLLECTIVE_OPERATIONS_TOTAL,
    COLLECTIVE_SECONDS_TOTAL,
    JOB_STEPS_TOTAL,
    JOB_STEP_SECONDS_TOTAL,
    JOB_SAMPLES_TOTAL,
    COLLECTIVE_WAIT_SECONDS_TOTAL,
    EFA_BANDWIDTH_FACTOR,
    RUNTIME_PROCESSES,
    ECC_EVENTS_TOTAL,
    HOST_CPU_SECONDS,
    HOST_MEMORY_USED,
    HOST_MEMORY_TOTAL,
    BUILD_INFO,
    SOURCE_UP,
    COLLECTION_DURATION,
    LAST_COLLECTION,
)
# Only with ``--per-process``.
PER_PROCESS_METRICS: tuple[Quantity, ...] = (PROCESS_CORE_BUSY_SECONDS, PROCESS_HBM_HELD)

# ``/api/v1/history`` series, in ``/api/v1/history/metrics`` order: per NeuronCore, then the host.
HISTORY_PER_CORE: tuple[Quantity, ...] = (
    CORE_UTILIZATION,
    CORE_FLOPS_PER_SECOND,
    CORE_HBM_USED_TOTAL,
    *ENGINE_UTILIZATIONS,
)
HISTORY_HOST: tuple[Quantity, ...] = (HOST_CPU_UTILIZATION, HOST_MEMORY_IN_USE)


def family_of(quantity: Quantity) -> Family:
    """The metric family of a quantity that has one."""
    family = quantity.family
    if family is None:
        raise ValueError(f"{quantity.key}: not a metric family")
    return family


def quantities() -> Iterator[Quantity]:
    """Every quantity of the table, once each."""
    seen: set[int] = set()
    for value in globals().values():
        for q in value if isinstance(value, tuple) else (value,):
            if isinstance(q, Quantity) and id(q) not in seen:
                seen.add(id(q))
                yield q


# -- Kubernetes (neuron-exporter --enable-k8s-info, docs/kubernetes.md) ---------------------------

# Labels naming the pod container that holds a NeuronCore, as dcgm-exporter names a GPU's pod
# ("" when no pod holds the core); added after the family's own labels.
K8S_LABELS = ("pod", "namespace", "container")
# The per-core families that carry them with --enable-k8s-info.
K8S_LABELLED_METRICS: tuple[Quantity, ...] = (
    CORE_BUSY_SECONDS,
    CORE_ENGINE_BUSY_SECONDS,
    CORE_ENGINE_UTILIZATION,
    CORE_FLOPS,
    CORE_IN_USE,
)
