"""The extended metric families (``report.fields.EXTENDED_METRICS``) rendered from the latest collected state.

``ExtendedCollector`` is a prometheus_client custom collector: a scrape reads the state the
collection thread published last and turns it into metric families; it never talks to the daemon.
Names, types, help texts and label names come from the field table (``report.fields``); this
module only says where each family's samples come from (``SAMPLERS``, one function per quantity).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

from neurontools import __version__
from neurontools.contract.schema import (
    CORE_MEMORY_KEYS,
    ENGINE_KEYS,
    ERROR_SUMMARY_KEYS,
    EXECUTION_SUMMARY_KEYS,
    HW_COUNTER_KEYS,
    VCPU_FIELDS,
)
from neurontools.contract.snapshot_models import JobCounters
from neurontools.exporter.collector import CollectedState
from neurontools.exporter.fields import LATENCY_BUCKETS
from neurontools.report import fields, k8s
from neurontools.report.fields import (
    EXTENDED_METRICS,
    K8S_LABELLED_METRICS,
    K8S_LABELS,
    PER_PROCESS_METRICS,
    Family,
    Quantity,
    family_of,
)
from neurontools.report.period import LINK_TYPES

Sample = tuple[tuple[str, ...], Any]  # label values in the family's label order, value
Sampler = Callable[[CollectedState], list[Sample]]

SOURCE = "daemon"


def _cores(state: CollectedState) -> list[tuple[str, str, int]]:
    """(neuron_device, neuroncore, core) label values of every core of the instance."""
    snap = state.snapshot
    if snap is None:
        return []
    hardware = snap.hardware
    return [(str(hardware.layout.device_of(c)), str(c), c) for c in range(hardware.layout.core_count)]


def _instance_info(state: CollectedState) -> list[Sample]:
    snap = state.snapshot
    if snap is None:
        return []
    i, h = snap.instance, snap.hardware
    values = (
        i.instance_id,
        i.instance_type,
        i.instance_availability_zone,
        i.instance_region,
        h.neuron_device_type,
        h.neuroncore_version,
    )
    return [(values, 1)]


def _busy(state: CollectedState) -> list[Sample]:
    return [((d, c), state.totals.busy.get(core, 0.0)) for d, c, core in _cores(state)]


def _engine_busy(state: CollectedState) -> list[Sample]:
    t = state.totals.engines
    return [((d, c, e), t.get((core, e), 0.0)) for d, c, core in _cores(state) for e in ENGINE_KEYS]


def _engine_utilization(state: CollectedState) -> list[Sample]:
    period = state.rated
    if period is None:
        return []
    return [
        ((d, c, e), period.cores[core].engine_utilization(e))
        for d, c, core in _cores(state)
        if core in period.cores
        for e in ENGINE_KEYS
    ]


def _flops(state: CollectedState) -> list[Sample]:
    return [((d, c), state.totals.flops.get(core, 0)) for d, c, core in _cores(state)]


def _in_use(state: CollectedState) -> list[Sample]:
    if state.measured is None:
        return []
    owned = state.measured.owners
    return [((d, c), 1 if core in owned else 0) for d, c, core in _cores(state)]


def _hbm_used(state: CollectedState) -> list[Sample]:
    period = state.measured
    if period is None:
        return []
    devices = range(period.cur.hardware.neuron_device_count)
    return [((str(dev), cat), v) for dev in devices for cat, v in period.hbm_of_device(dev).items()]


def _hbm_total(state: CollectedState) -> list[Sample]:
    snap = state.snapshot
    if snap is None:
        return []
    size = snap.hardware.neuron_device_memory_size
    return [((str(dev),), size) for dev in range(snap.hardware.neuron_device_count)]


def _executions(state: CollectedState) -> list[Sample]:
    return [((k,), state.totals.executions.get(k, 0)) for k in EXECUTION_SUMMARY_KEYS]


def _errors(state: CollectedState) -> list[Sample]:
    return [((k,), state.totals.errors.get(k, 0)) for k in ERROR_SUMMARY_KEYS]


def _latency(state: CollectedState) -> list[Sample]:
    t = state.totals
    cumulative, buckets = 0, []
    for bound, count in zip((*LATENCY_BUCKETS, float("inf")), t.latency_buckets, strict=True):
        cumulative += count
        buckets.append((floatToGoString(bound), cumulative))
    return [((), (buckets, t.latency_sum))]


def _collective_bytes(state: CollectedState) -> list[Sample]:
    return [((k,), state.totals.collective_bytes.get(k, 0)) for k in LINK_TYPES]


def _collective_operations(state: CollectedState) -> list[Sample]:
    return [((k,), state.totals.collective_operations.get(k, 0)) for k in LINK_TYPES]


def _collective_seconds(state: CollectedState) -> list[Sample]:
    return [((k,), state.totals.collective_seconds.get(k, 0.0)) for k in LINK_TYPES]


def _jobs(get: Callable[[JobCounters], float]) -> Sampler:
    """A ``neuron_job_*`` family: the daemon's counters of each job as they are (docs/multinode.md)."""

    def sample(state: CollectedState) -> list[Sample]:
        return [] if state.snapshot is None else [((j.job_id,), get(j)) for j in state.snapshot.jobs]

    return sample


def _efa_factor(state: CollectedState) -> list[Sample]:
    return [] if state.snapshot is None else [((), state.snapshot.efa_bandwidth_factor)]


def _runtime_processes(state: CollectedState) -> list[Sample]:
    return [] if state.snapshot is None else [((), len(state.snapshot.runtime_processes))]


def _ecc(state: CollectedState) -> list[Sample]:
    return [((str(dev), kind), v) for (dev, kind), v in sorted(state.totals.ecc.items()) if kind in HW_COUNTER_KEYS]


def _host_cpu(state: CollectedState) -> list[Sample]:
    cpu = state.totals.host_cpu
    return [((mode,), cpu[mode]) for mode in VCPU_FIELDS if mode in cpu]


def _host_memory_used(state: CollectedState) -> list[Sample]:
    return [] if state.snapshot is None else [((), state.snapshot.host.memory.used)]


def _host_memory_total(state: CollectedState) -> list[Sample]:
    return [] if state.snapshot is None else [((), state.snapshot.host.memory.total)]


def _build_info(state: CollectedState) -> list[Sample]:
    return [((__version__,), 1)]


def _source_up(state: CollectedState) -> list[Sample]:
    return [((SOURCE,), 1 if state.source_up else 0)]


def _duration(state: CollectedState) -> list[Sample]:
    return [] if state.duration is None else [((), state.duration)]


def _last_collection(state: CollectedState) -> list[Sample]:
    return [] if state.last_success is None else [((), state.last_success)]


def _process_busy(state: CollectedState) -> list[Sample]:
    if state.snapshot is None:
        return []
    return [
        ((str(p.pid), p.tag, str(core)), counters.busy)
        for p in state.snapshot.runtime_processes
        for core, counters in p.cores.items()
    ]


def _process_hbm(state: CollectedState) -> list[Sample]:
    if state.snapshot is None:
        return []
    return [
        ((str(p.pid), p.tag, str(core), cat), getattr(usage, cat))
        for p in state.snapshot.runtime_processes
        for core, usage in p.memory.cores.items()
        for cat in CORE_MEMORY_KEYS
    ]


SAMPLERS: dict[Quantity, Sampler] = {
    fields.INSTANCE_INFO: _instance_info,
    fields.CORE_BUSY_SECONDS: _busy,
    fields.CORE_ENGINE_BUSY_SECONDS: _engine_busy,
    fields.CORE_ENGINE_UTILIZATION: _engine_utilization,
    fields.CORE_FLOPS: _flops,
    fields.CORE_IN_USE: _in_use,
    fields.DEVICE_HBM_USED: _hbm_used,
    fields.DEVICE_HBM_TOTAL: _hbm_total,
    fields.EXECUTIONS_TOTAL: _executions,
    fields.EXECUTION_ERRORS_TOTAL: _errors,
    fields.EXECUTION_LATENCY: _latency,
    fields.COMPILE_CACHE_HITS_TOTAL: lambda s: [((), s.totals.compile_hits)],
    fields.COMPILE_CACHE_MISSES_TOTAL: lambda s: [((), s.totals.compile_misses)],
    fields.COLLECTIVE_BYTES_TOTAL: _collective_bytes,
    fields.COLLECTIVE_OPERATIONS_TOTAL: _collective_operations,
    fields.COLLECTIVE_SECONDS_TOTAL: _collective_seconds,
    fields.JOB_STEPS_TOTAL: _jobs(lambda j: j.steps),
    fields.JOB_STEP_SECONDS_TOTAL: _jobs(lambda j: j.step_seconds),
    fields.JOB_SAMPLES_TOTAL: _jobs(lambda j: j.samples),
    fields.COLLECTIVE_WAIT_SECONDS_TOTAL: _jobs(lambda j: j.wait_seconds),
    fields.EFA_BANDWIDTH_FACTOR: _efa_factor,
    fields.RUNTIME_PROCESSES: _runtime_processes,
    fields.ECC_EVENTS_TOTAL: _ecc,
    fields.HOST_CPU_SECONDS: _host_cpu,
    fields.HOST_MEMORY_USED: _host_memory_used,
    fields.HOST_MEMORY_TOTAL: _host_memory_total,
    fields.BUILD_INFO: _build_info,
    fields.SOURCE_UP: _source_up,
    fields.COLLECTION_DURATION: _duration,
    fields.LAST_COLLECTION: _last_collection,
    fields.PROCESS_CORE_BUSY_SECONDS: _process_busy,
    fields.PROCESS_HBM_HELD: _process_hbm,
}


def family_metric(family: Family, samples: list[Sample]) -> Metric:
    """One prometheus_client metric family from the table entry and its samples."""
    labels = list(family.labels)
    if family.kind == "counter":
        counter = CounterMetricFamily(family.name, family.help, labels=labels)
        for values, value in samples:
            counter.add_metric(list(values), value)
        return counter
    if family.kind == "gauge":
        gauge = GaugeMetricFamily(family.name, family.help, labels=labels)
        for values, value in samples:
            gauge.add_metric(list(values), value)
        return gauge
    if family.kind == "histogram":
        histogram = HistogramMetricFamily(family.name, family.help, labels=labels)
        for values, (buckets, total) in samples:
            histogram.add_metric(list(values), buckets, total)
        return histogram
    if family.kind == "info":
        info = InfoMetricFamily(family.name.removesuffix("_info"), family.help)
        for values, _ in samples:
            info.add_metric([], dict(zip(labels, values, strict=True)))
        return info
    raise ValueError(f"{family.name}: unknown metric kind {family.kind!r}")


def k8s_family(family: Family) -> Family:
    """``family`` with the pod labels after its own (``--enable-k8s-info``)."""
    return Family(family.name, family.kind, family.help, (*family.labels, *K8S_LABELS))


def with_pod_labels(samples: list[Sample], core_at: int, pods: dict[int, tuple[str, str, str]]) -> list[Sample]:
    """``samples`` with the (pod, namespace, container) of the core named by label ``core_at``."""
    return [((*values, *pods.get(int(values[core_at]), k8s.NO_POD_LABELS)), value) for values, value in samples]


class ExtendedCollector:
    """Renders the extended families from ``state()`` (the collector's latest published state).

    ``kubernetes``: per-core families (``fields.K8S_LABELLED_METRICS``) carry the labels of the pod
    holding the core, from the same snapshot (``report.k8s``; docs/kubernetes.md)."""

    def __init__(
        self, state: Callable[[], CollectedState], *, per_process: bool = False, kubernetes: bool = False
    ) -> None:
        self.state = state
        self.quantities = EXTENDED_METRICS + (PER_PROCESS_METRICS if per_process else ())
        labelled = K8S_LABELLED_METRICS if kubernetes else ()
        self.families = tuple(k8s_family(family_of(q)) if q in labelled else family_of(q) for q in self.quantities)
        # quantity -> position of its neuroncore label, for the families that gain pod labels
        self.pod_labelled = {q: family_of(q).labels.index("neuroncore") for q in labelled}

    def collect(self) -> Iterator[Metric]:
        state = self.state()  # one immutable object for the whole scrape
        pods = k8s.core_labels(state.snapshot) if self.pod_labelled else {}
        for quantity, family in zip(self.quantities, self.families, strict=True):
            samples = SAMPLERS[quantity](state)
            core_at = self.pod_labelled.get(quantity)
            if core_at is not None:
                samples = with_pod_labels(samples, core_at, pods)
            yield family_metric(family, samples)
