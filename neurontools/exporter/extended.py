"""The extended metric families (``fields.FAMILIES``) rendered from the latest collected state.

``ExtendedCollector`` is a prometheus_client custom collector: a scrape reads the state the
collection thread published last and turns it into metric families; it never talks to the daemon.
Names, types, help texts and label names come from the ``fields`` table; this module only says
where each family's samples come from (``SAMPLERS``, one function per family name).
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
from neurontools.exporter.collector import CollectedState
from neurontools.exporter.fields import (
    ENGINE_LABEL_VALUES,
    FAMILIES,
    HBM_CATEGORIES,
    LATENCY_BUCKETS,
    PER_PROCESS_FAMILIES,
    Family,
)
from neurontools.report.period import LINK_TYPES
from neurontools.report.schema import ERROR_SUMMARY_KEYS, EXECUTION_SUMMARY_KEYS, HW_COUNTER_KEYS, VCPU_FIELDS

Sample = tuple[tuple[str, ...], Any]  # label values in the family's label order, value
Sampler = Callable[[CollectedState], list[Sample]]

SOURCE = "daemon"


def _cores(state: CollectedState) -> list[tuple[str, str, int]]:
    """(neuron_device, neuroncore, core) label values of every core of the instance."""
    snap = state.snapshot
    if snap is None:
        return []
    hardware = snap.hardware
    return [(str(hardware.device_of(c)), str(c), c) for c in range(hardware.core_count)]


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
    return [((d, c, e), t.get((core, e), 0.0)) for d, c, core in _cores(state) for e in ENGINE_LABEL_VALUES]


def _engine_utilization(state: CollectedState) -> list[Sample]:
    period = state.rated
    if period is None:
        return []
    return [
        ((d, c, e), period.cores[core].engine_utilization(e))
        for d, c, core in _cores(state)
        if core in period.cores
        for e in ENGINE_LABEL_VALUES
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
        for cat in HBM_CATEGORIES
    ]


SAMPLERS: dict[str, Sampler] = {
    "neuron_instance_info": _instance_info,
    "neuroncore_busy_seconds_total": _busy,
    "neuroncore_engine_busy_seconds_total": _engine_busy,
    "neuroncore_engine_utilization_ratio": _engine_utilization,
    "neuroncore_flops_total": _flops,
    "neuroncore_in_use": _in_use,
    "neurondevice_hbm_used_bytes": _hbm_used,
    "neurondevice_hbm_total_bytes": _hbm_total,
    "neuron_executions_total": _executions,
    "neuron_execution_errors_total": _errors,
    "neuron_execution_latency_seconds": _latency,
    "neuron_compile_cache_hits_total": lambda s: [((), s.totals.compile_hits)],
    "neuron_compile_cache_misses_total": lambda s: [((), s.totals.compile_misses)],
    "neuron_collective_bytes_total": _collective_bytes,
    "neuron_collective_operations_total": _collective_operations,
    "neuron_runtime_processes": _runtime_processes,
    "neuron_ecc_events_total": _ecc,
    "neuron_host_cpu_seconds_total": _host_cpu,
    "neuron_host_memory_used_bytes": _host_memory_used,
    "neuron_host_memory_total_bytes": _host_memory_total,
    "neuron_exporter_build_info": _build_info,
    "neuron_exporter_source_up": _source_up,
    "neuron_exporter_collection_duration_seconds": _duration,
    "neuron_exporter_last_collection_timestamp_seconds": _last_collection,
    "neuron_process_neuroncore_busy_seconds_total": _process_busy,
    "neuron_process_hbm_used_bytes": _process_hbm,
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


class ExtendedCollector:
    """Renders the extended families from ``state()`` (the collector's latest published state)."""

    def __init__(self, state: Callable[[], CollectedState], *, per_process: bool = False) -> None:
        self.state = state
        self.families = FAMILIES + (PER_PROCESS_FAMILIES if per_process else ())

    def collect(self) -> Iterator[Metric]:
        state = self.state()  # one immutable object for the whole scrape
        for family in self.families:
            yield family_metric(family, SAMPLERS[family.name](state))
