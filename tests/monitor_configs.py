"""neuron-monitor configuration files for the tests, made one way (docs/reference/neuron-monitor.md
§Configuration file): every application group of the reference example for every process, and
the system groups, at one period."""

from __future__ import annotations

from typing import Any

# the reference configuration's application groups, in its order
APP_METRICS = ("neuroncore_counters", "memory_used", "neuron_runtime_vcpu_usage", "execution_stats")
SYSTEM_METRICS = ("vcpu_usage", "memory_info", "neuron_hw_counters")


def monitor_config(period: str = "1s", hw_counters_period: str | None = None) -> dict[str, Any]:
    """The configuration as JSON data; ``hw_counters_period``: a period of its own for
    ``neuron_hw_counters`` (the reference example's ``2s``)."""
    system: list[dict[str, str]] = [{"type": t} for t in SYSTEM_METRICS]
    if hw_counters_period is not None:
        system[-1] = {"period": hw_counters_period, "type": "neuron_hw_counters"}
    return {
        "period": period,
        "neuron_runtimes": [{"tag_filter": ".*", "metrics": [{"type": t} for t in APP_METRICS]}],
        "system_metrics": system,
    }
