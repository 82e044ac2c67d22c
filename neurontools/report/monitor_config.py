"""The neuron-monitor configuration model the report builder follows: which groups, for which
processes, how often (docs/reference/neuron-monitor.md §Configuration file).

Reading a configuration file into this model is neuron-monitor's business (``monitor.config``);
neuron-exporter builds the model directly: ``every_group_config`` is what it collects once per
interval (neuron-top reads no report: its figures come from the period itself).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from neurontools.contract.schema import DEFAULT_APP_GROUPS, DEFAULT_SYSTEM_GROUPS, NEURON_HW_COUNTERS

DEFAULT_PERIOD = 5.0
MATCH_ALL = ".*"

# (runtime entry index or None for system groups, group type)
GroupKey = tuple[int | None, str]


@dataclass(frozen=True)
class MetricGroup:
    """One configured group with its resolved period."""

    type: str
    period: float  # seconds (metric > runtime entry > root)
    runtime: int | None = None  # index of its neuron_runtimes entry; None for a system group

    @property
    def key(self) -> GroupKey:
        return (self.runtime, self.type)


@dataclass(frozen=True)
class RuntimeSelector:
    """One ``neuron_runtimes[]`` entry: which processes, which application-level groups."""

    tag_filter: str
    period: float
    metrics: tuple[MetricGroup, ...] = ()
    pattern: re.Pattern[str] = field(default=re.compile(MATCH_ALL), compare=False, repr=False)

    def matches(self, tag: str) -> bool:
        return self.pattern.search(tag) is not None


@dataclass(frozen=True)
class MonitorConfig:
    period: float = DEFAULT_PERIOD
    neuron_runtimes: tuple[RuntimeSelector, ...] = ()
    system_metrics: tuple[MetricGroup, ...] = ()

    @property
    def groups(self) -> tuple[MetricGroup, ...]:
        """Every configured group: application groups of each runtime entry, then system groups."""
        app = tuple(m for entry in self.neuron_runtimes for m in entry.metrics)
        return app + self.system_metrics

    def group_keys(self) -> tuple[GroupKey, ...]:
        return tuple(g.key for g in self.groups)

    def periods(self) -> dict[GroupKey, float]:
        return {g.key: g.period for g in self.groups}

    def runtime_for(self, tag: str) -> int | None:
        """Index of the first ``neuron_runtimes`` entry watching a process with this tag, or None."""
        for index, entry in enumerate(self.neuron_runtimes):
            if entry.matches(tag):
                return index
        return None


def default_config() -> MonitorConfig:
    """The configuration without ``-c``: every application group for every process, vcpu_usage and
    memory_info, period 5 s (docs/reference/neuron-monitor.md §Command line)."""
    return MonitorConfig(
        period=DEFAULT_PERIOD,
        neuron_runtimes=(
            RuntimeSelector(
                tag_filter=MATCH_ALL,
                period=DEFAULT_PERIOD,
                metrics=tuple(MetricGroup(t, DEFAULT_PERIOD, 0) for t in DEFAULT_APP_GROUPS),
            ),
        ),
        system_metrics=tuple(MetricGroup(t, DEFAULT_PERIOD) for t in DEFAULT_SYSTEM_GROUPS),
    )


def every_group_config(period: float) -> MonitorConfig:
    """neuron-monitor's default configuration with every period set to ``period``, plus
    ``neuron_hw_counters`` (neuron-exporter's compatible ``hardware_ecc_events_total`` needs it)."""
    app = tuple(MetricGroup(t, period, 0) for t in DEFAULT_APP_GROUPS)
    system = (*DEFAULT_SYSTEM_GROUPS, NEURON_HW_COUNTERS)
    return MonitorConfig(
        period=period,
        neuron_runtimes=(RuntimeSelector(tag_filter=MATCH_ALL, period=period, metrics=app),),
        system_metrics=tuple(MetricGroup(t, period) for t in dict.fromkeys(system)),
    )
