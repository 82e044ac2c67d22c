"""Percent and the 0-1 shares behind it: the one conversion each way.

Every model (period, neuron-top's ``Sample``, the exporter's ratios) stores shares (0-1; a
process's CPU share may exceed 1, one per vCPU it keeps busy). Percent appears only where a format
demands it: neuron-monitor's report (written by ``report.groups``, read back by neuron-top and the
compatible exporter) and neuron-top's screen (``top.formats``).
"""

from __future__ import annotations


def percent(share: float) -> float:
    """A 0-1 share as percent."""
    return share * 100


def share(percent_value: float) -> float:
    """A percent figure (a report's, say) as a 0-1 share."""
    return percent_value / 100
