"""The official ``neuron-monitor-prometheus.py``'s metrics (docs/reference/neuron-monitor-prometheus.md), from reports.

``CompatMetrics`` is a prometheus_client custom collector: feed it neuron-monitor reports with
``update(report)`` (from a stdin stream, or built from daemon snapshots), register it with any
``CollectorRegistry``; ``collect()`` only reads the stored values. It holds no global state.

Names, types, HELP texts, labels and label values are the official script's, quirks included:

* instance labels come from the **first** report's ``instance_info`` and are reused for the
  collector's lifetime (``ultraserver_id`` only when that report has it);
* application-level metrics add ``runtime_tag``; per-core memory carries ``memory_location="None"``;
  core and device indices are printed as decimal integers;
* counters add each report's per-period counts (series ``_created`` when first incremented);
* ``system_vcpu_usage_ratio``: user = user+nice, system = system+io_wait+irq+soft_irq, each capped
  at 100 then divided by 100;
* a group is used only when its ``error`` is ``""``; a runtime entry with an error is skipped;
  unknown groups are ignored; ``update`` returns the lines the official script prints on stderr;
* a family exists from the first report that had its group; families are exposed in creation
  order (the official registry order), a family without series still has its HELP/TYPE lines;
* a report with an empty (or missing) ``neuron_runtime_data`` clears every series of the
  application-level families, so the series of finished processes disappear.

Deliberate differences from the official copy (none changes a name, label or value of a valid
report; all are documented in the module and tested):

* clearing on an idle report is limited to application-level families. The official copy also
  clears the system families there; their gauges are set again from the same report, but its
  ``hardware_ecc_events_total`` then restarts from each report's per-period count on every idle
  report, so ``increase()`` undercounts ECC events on idle hosts. Here that counter only grows.
* ``neuron_hardware_info`` is created from the first report whose ``neuron_hardware_info`` has an
  empty ``error`` (the official copy also takes one reporting a missing driver, with zero counts,
  and keeps it forever); until then the error is reported like a group error.
* malformed data (a missing key, a non-number, a negative count) makes the official script exit
  with a traceback; here that one group is skipped as a whole (no partial update) with a message
  ``Invalid <group>[ for runtime tag <tag>]: <reason>``. Pre-2.5 ``memory_used`` (no
  ``usage_breakdown``) and devices without ``sram_ecc_corrected`` are accepted.
* optional ``prune_exited=True`` (not the official behaviour, off by default): also drop the
  series of runtime tags absent from a non-empty report.

``k8s_info=True`` (``--enable-k8s-info``; what the official flag adds is not public): the
per-core families (``K8S_FAMILIES``) carry ``pod``, ``namespace`` and ``container`` after their
own labels, read from each report's ``neuron_k8s_info.neuroncores_k8s_info`` (containers joined
with ``,``); a core without an entry there, or a report without the object, gives ``""``
(docs/kubernetes.md).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from neurontools.contract.json_values import describe, is_number, is_object
from neurontools.contract.names import CORE_MEMORY_KEYS, ECC_EVENTS
from neurontools.contract.percent import share

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


class InvalidGroup(Exception):
    """A group's data does not have the report's shape."""


def _number(value: Any) -> float:
    if not is_number(value):
        raise InvalidGroup(f"expected a number, got {describe(value)}")
    return float(value)


def _count(value: Any) -> float:
    amount = _number(value)
    if not math.isfinite(amount) or amount < 0:
        raise InvalidGroup(f"expected a non-negative count, got {value!r}")
    return amount


def _index(key: Any) -> str:
    """A core index as the official script labels it (``int(key)``, printed in decimal)."""
    try:
        return str(int(key))
    except (TypeError, ValueError):
        raise InvalidGroup(f"expected an integer index, got {key!r}") from None


def _text(value: Any) -> str:
    """A label value: ``str(value)`` with what UTF-8 cannot carry (lone surrogates, which a
    report's JSON may hold as ``\\udXXX`` escapes) replaced, so a scrape always encodes
    (docs/fuzzing.md)."""
    text = str(value)
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not is_object(value):
        raise InvalidGroup(f"{what} is not an object")
    return value


def _reason(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"missing key {exc.args[0]!r}"
    return str(exc)


@dataclass
class _Series:
    value: float
    created: float


@dataclass
class _Store:
    family: CompatFamily
    labelnames: tuple[str, ...]
    series: dict[LabelValues, _Series] = field(default_factory=dict)


class _Batch:
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


def _neuroncore_counters(batch: _Batch, data: Mapping[str, Any]) -> None:
    batch.declare("neuroncore_utilization_ratio")
    for core, values in _mapping(data["neuroncores_in_use"], "neuroncores_in_use").items():
        ratio = share(_number(_mapping(values, f"core {core}")["neuroncore_utilization"]))
        index = _index(core)
        batch.set("neuroncore_utilization_ratio", (index, *batch.pod(index)), ratio)


def _neuron_runtime_vcpu_usage(batch: _Batch, data: Mapping[str, Any]) -> None:
    batch.declare("neuron_runtime_vcpu_usage_ratio")
    usage = _mapping(data["vcpu_usage"], "vcpu_usage")
    for usage_type in ("user", "system"):
        batch.set("neuron_runtime_vcpu_usage_ratio", (usage_type,), share(_number(usage[usage_type])))


def _memory_used(batch: _Batch, data: Mapping[str, Any]) -> None:
    used = _mapping(data["neuron_runtime_used_bytes"], "neuron_runtime_used_bytes")
    batch.declare("neuron_runtime_memory_used_bytes")
    for location in ("host", "neuron_device"):
        batch.set("neuron_runtime_memory_used_bytes", (location,), _number(used[location]))
    if "usage_breakdown" not in used:  # pre-2.5 report: totals only
        return
    cores = _mapping(_mapping(used["usage_breakdown"], "usage_breakdown")["neuroncore_memory_usage"], "cores")
    for kind in CORE_MEMORY_KEYS:
        name = f"neuroncore_memory_usage_{kind}"
        batch.declare(name)
        for core, usage in cores.items():
            index = _index(core)
            batch.set(name, ("None", index, *batch.pod(index)), _number(_mapping(usage, f"core {core}")[kind]))


def _execution_stats(batch: _Batch, data: Mapping[str, Any]) -> None:
    for name, key in (("execution_errors_total", "error_summary"), ("execution_status_total", "execution_summary")):
        batch.declare(name)
        for kind, count in _mapping(data[key], key).items():
            batch.inc(name, (_text(kind),), _count(count))
    batch.declare("execution_latency_seconds")
    total = _mapping(data["latency_stats"], "latency_stats")["total_latency"]
    if total is not None:
        for percentile, seconds in _mapping(total, "total_latency").items():
            batch.set("execution_latency_seconds", (_text(percentile),), _number(seconds))


def _neuron_hw_counters(batch: _Batch, data: Mapping[str, Any]) -> None:
    batch.declare("hardware_ecc_events_total")
    devices = data["neuron_devices"]
    if not isinstance(devices, list):
        raise InvalidGroup("neuron_devices is not an array")
    for device in devices:
        device = _mapping(device, "device")
        index = _text(device["neuron_device_index"])
        for event in ECC_EVENTS:
            if event in device:  # older tools have no sram_ecc_corrected
                batch.inc("hardware_ecc_events_total", (event, index), _count(device[event]))


def _vcpu_usage(batch: _Batch, data: Mapping[str, Any]) -> None:
    batch.declare("system_vcpu_count")
    batch.set("system_vcpu_count", (), float(len(_mapping(data["usage_data"], "usage_data"))))
    average = _mapping(data["average_usage"], "average_usage")
    batch.declare("system_vcpu_usage_ratio")
    for usage_type, fields in VCPU_AGGREGATES:
        total = sum(_number(average[name]) for name in fields)
        batch.set("system_vcpu_usage_ratio", (usage_type,), share(min(total, 100.0)))


def _memory_info(batch: _Batch, data: Mapping[str, Any]) -> None:
    for prefix in ("memory", "swap"):
        for stat in ("total_bytes", "used_bytes"):
            name = f"system_{prefix}_{stat}"
            batch.declare(name)
            batch.set(name, (), _number(data[f"{prefix}_{stat}"]))


Handler = Callable[[_Batch, Mapping[str, Any]], None]
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


def _created_series_enabled() -> bool:
    """prometheus_client's switch for ``_created`` series, honoured the same way."""
    return os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False").lower() not in ("true", "1", "t")


class CompatMetrics(Collector):
    """The official exporter's metrics, updated from neuron-monitor reports; thread-safe."""

    def __init__(
        self,
        *,
        prune_exited: bool = False,
        clock: Callable[[], float] = time.time,
        created_series: bool | None = None,
        k8s_info: bool = False,
    ) -> None:
        self.prune_exited = prune_exited
        self.k8s_info = k8s_info
        self._pods: dict[str, LabelValues] | None = {} if k8s_info else None
        self._clock = clock
        self._created = _created_series_enabled() if created_series is None else created_series
        self._lock = threading.Lock()
        self._instance: dict[str, str] | None = None
        self._stores: dict[str, _Store] = {}
        self._infos: dict[str, dict[str, str]] = {}
        self._order: list[str] = []  # family names in creation order
        self.reports = 0

    @property
    def instance_labels(self) -> dict[str, str] | None:
        """The instance labels in use (from the first report), None before it."""
        with self._lock:
            return None if self._instance is None else dict(self._instance)

    # -- update -----------------------------------------------------------------------------------

    def update(self, report: Mapping[str, Any]) -> list[str]:
        """Apply one report; returns the messages the official script would print on stderr."""
        if not is_object(report):
            return [f"Invalid report: expected a JSON object, got {type(report).__name__}"]
        messages: list[str] = []
        with self._lock:
            if self._instance is None:
                self._instance = _instance_labels(report.get("instance_info"))
            if self.k8s_info:
                self._pods = _core_pods(report.get("neuron_k8s_info"), messages)
            runtimes = report.get("neuron_runtime_data")
            if runtimes:
                self._runtimes(runtimes, messages)
            else:
                self._clear(APP)
            system = report.get("system_data")
            if system is not None:
                self._groups(system, SYSTEM_HANDLERS, None, messages)
            self._create_info("instance_info", dict(self._instance))
            hardware = report.get("neuron_hardware_info")
            if hardware is not None and "neuron_hardware_info" not in self._infos:
                self._hardware_info(hardware, messages)
            self.reports += 1
        return messages

    def _runtimes(self, runtimes: Any, messages: list[str]) -> None:
        if not isinstance(runtimes, list):
            messages.append("Invalid report: neuron_runtime_data is not an array")
            return
        present: set[str] = set()
        for entry in runtimes:
            if not is_object(entry) or "neuron_runtime_tag" not in entry:
                messages.append("Invalid report: a neuron_runtime_data entry has no neuron_runtime_tag")
                continue
            tag = _text(entry["neuron_runtime_tag"])
            present.add(tag)
            error = entry.get("error", "")
            if error != "":
                messages.append(f"Runtime {tag} error: {error}")
                continue
            self._groups(entry.get("report") or {}, APP_HANDLERS, tag, messages)
        if self.prune_exited:
            self._prune(present)

    def _groups(self, groups: Any, handlers: Mapping[str, Handler], tag: str | None, messages: list[str]) -> None:
        where = "" if tag is None else f" for runtime tag {tag}"
        if not is_object(groups):
            messages.append(f"Invalid report: {'report' if tag is not None else 'system_data'}{where} is not an object")
            return
        assert self._instance is not None
        base = tuple(self._instance.values()) + ((tag,) if tag is not None else ())
        for name, data in groups.items():
            handler = handlers.get(name)
            if handler is None:
                continue
            if not is_object(data):
                messages.append(f"Invalid {name}{where}: not an object")
                continue
            error = data.get("error", "")
            if error != "":
                messages.append(f"Error getting {name}{where}: {error}")
                continue
            batch = _Batch(base, self._pods)
            try:
                handler(batch, data)
            except (InvalidGroup, KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
                messages.append(f"Invalid {name}{where}: {_reason(exc)}")
                continue
            self._apply(batch)

    def _hardware_info(self, hardware: Any, messages: list[str]) -> None:
        if not is_object(hardware):
            messages.append("Invalid neuron_hardware_info: not an object")
            return
        error = hardware.get("error", "")
        if error != "":
            messages.append(f"Error getting neuron_hardware_info: {error}")
            return
        missing = [key for key in HARDWARE_INFO_LABELS if key not in hardware]
        if missing:
            messages.append(f"Invalid neuron_hardware_info: missing key {missing[0]!r}")
            return
        labels = {key: _text(hardware[key]) for key in HARDWARE_INFO_LABELS}
        labels.update({key: _text(hardware[key]) for key in OPTIONAL_HARDWARE_INFO_LABELS if key in hardware})
        assert self._instance is not None
        labels.update(self._instance)
        self._create_info("neuron_hardware_info", labels)

    # -- state ------------------------------------------------------------------------------------

    def _store(self, name: str) -> _Store:
        store = self._stores.get(name)
        if store is None:
            family = FAMILY_BY_NAME[name]
            assert self._instance is not None
            tag = ("runtime_tag",) if family.scope == APP else ()
            pod = K8S_LABELS if self.k8s_info and name in K8S_FAMILIES else ()
            store = _Store(family, (*self._instance, *tag, *family.labels, *pod))
            self._stores[name] = store
            self._order.append(name)
        return store

    def _apply(self, batch: _Batch) -> None:
        for op, name, labels, value in batch.ops:
            store = self._store(name)
            if op == "declare":
                continue
            series = store.series.get(labels)
            if series is None:
                series = store.series[labels] = _Series(0.0, self._clock())
            series.value = value if op == "set" else series.value + value

    def _create_info(self, name: str, labels: dict[str, str]) -> None:
        if name not in self._infos:
            self._infos[name] = labels
            self._order.append(name)

    def _clear(self, scope: str) -> None:
        for store in self._stores.values():
            if store.family.scope == scope:
                store.series.clear()

    def _prune(self, present: set[str]) -> None:
        assert self._instance is not None
        position = len(self._instance)  # runtime_tag follows the instance labels
        for store in self._stores.values():
            if store.family.scope == APP:
                for labels in [labels for labels in store.series if labels[position] not in present]:
                    del store.series[labels]

    # -- exposition -------------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            families = [self._family(name) for name in self._order]
        yield from families

    def _family(self, name: str) -> Metric:
        info = self._infos.get(name)
        if info is not None:
            spec = FAMILY_BY_NAME[name]
            family = InfoMetricFamily(spec.name.removesuffix("_info"), spec.help, labels=())
            family.add_metric((), info)
            return family
        store = self._stores[name]
        spec = store.family
        if spec.kind == "counter":
            counter = CounterMetricFamily(spec.name, spec.help, labels=store.labelnames)
            for labels, series in store.series.items():
                counter.add_metric(labels, series.value, created=series.created if self._created else None)
            return counter
        gauge = GaugeMetricFamily(spec.name, spec.help, labels=store.labelnames)
        for labels, series in store.series.items():
            gauge.add_metric(labels, series.value)
        return gauge

    def describe(self) -> Iterator[Metric]:
        """Every family this collector may expose (so ``?name[]=`` filtering works from the start)."""
        for spec in FAMILIES:
            if spec.kind == "counter":
                yield CounterMetricFamily(spec.name, spec.help)
            elif spec.kind == "info":
                yield InfoMetricFamily(spec.name.removesuffix("_info"), spec.help)
            else:
                yield GaugeMetricFamily(spec.name, spec.help)


def _core_pods(info: Any, messages: list[str]) -> dict[str, LabelValues]:
    """Core index -> (pod, namespace, container) from a report's ``neuron_k8s_info`` (absent: none)."""
    if info is None:
        return {}
    try:
        info = _mapping(info, "neuron_k8s_info")
        if info.get("error", "") != "":
            messages.append(f"Error getting neuron_k8s_info: {info['error']}")
            return {}
        pods: dict[str, LabelValues] = {}
        for core, use in _mapping(info["neuroncores_k8s_info"], "neuroncores_k8s_info").items():
            use = _mapping(use, f"core {core}")
            containers = use.get("container_name") or []
            if not isinstance(containers, list):
                raise InvalidGroup(f"core {core}: container_name is not an array")
            pods[_index(core)] = (
                _text(use["pod_name"]),
                _text(use["namespace"]),
                ",".join(_text(c) for c in containers),
            )
    except (InvalidGroup, KeyError) as exc:
        messages.append(f"Invalid neuron_k8s_info: {_reason(exc)}")
        return {}
    return pods


def _instance_labels(info: Any) -> dict[str, str]:
    """Instance label values from a report's ``instance_info`` (missing fields: ``""``)."""
    info = info if is_object(info) else {}
    labels = {label: _text(info.get(key, "")) for label, key in INSTANCE_LABELS}
    labels.update({label: _text(info[key]) for label, key in OPTIONAL_INSTANCE_LABELS if key in info})
    return labels
