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

import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from neurontools.contract.json_values import is_object
from neurontools.exporter.compat_families import (
    APP,
    FAMILIES,
    FAMILY_BY_NAME,
    HARDWARE_INFO_LABELS,
    K8S_FAMILIES,
    K8S_LABELS,
    OPTIONAL_HARDWARE_INFO_LABELS,
    CompatFamily,
    LabelValues,
)
from neurontools.exporter.compat_groups import (
    APP_HANDLERS,
    SYSTEM_HANDLERS,
    Batch,
    Handler,
    InvalidGroup,
    core_pods,
    instance_labels,
    label_text,
    reason,
)


@dataclass
class _Series:
    value: float
    created: float


@dataclass
class _Store:
    family: CompatFamily
    labelnames: tuple[str, ...]
    series: dict[LabelValues, _Series] = field(default_factory=dict)


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
                self._instance = instance_labels(report.get("instance_info"))
            if self.k8s_info:
                self._pods = core_pods(report.get("neuron_k8s_info"), messages)
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
            tag = label_text(entry["neuron_runtime_tag"])
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
            batch = Batch(base, self._pods)
            try:
                handler(batch, data)
            except (InvalidGroup, KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
                messages.append(f"Invalid {name}{where}: {reason(exc)}")
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
        labels = {key: label_text(hardware[key]) for key in HARDWARE_INFO_LABELS}
        labels.update({key: label_text(hardware[key]) for key in OPTIONAL_HARDWARE_INFO_LABELS if key in hardware})
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

    def _apply(self, batch: Batch) -> None:
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

