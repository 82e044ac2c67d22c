"""The extended metric families of ``neuron-exporter``: a view of the field table (``report.fields``),
which holds each family's name, type, HELP text and label names next to the REST descriptions
and neuron-top's labels of the same quantities.

Naming follows Prometheus' rules: base units (seconds, bytes), ``_total`` for counters,
``_ratio`` for 0-1 values, bounded labels only (per-process labels are opt-in with
``--per-process``). Instance identity is attached once, by ``neuron_instance_info``; the scrape's
``instance`` label tells nodes apart. Source of every value: the daemon snapshot
(docs/snapshot.md); rates are left to PromQL (``rate(...[1m])``) wherever a counter exists.
"""

from __future__ import annotations

from neurontools.report.fields import EXTENDED_METRICS, PER_PROCESS_METRICS, Family, family_of

__all__ = ["BY_NAME", "FAMILIES", "LATENCY_BUCKETS", "PER_PROCESS_FAMILIES", "Family"]

# Upper bounds (seconds) of the execution latency histogram's buckets.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

FAMILIES: tuple[Family, ...] = tuple(family_of(q) for q in EXTENDED_METRICS)
# Per-process series (only with --per-process): labels pid and runtime_tag added.
PER_PROCESS_FAMILIES: tuple[Family, ...] = tuple(family_of(q) for q in PER_PROCESS_METRICS)
BY_NAME = {f.name: f for f in FAMILIES + PER_PROCESS_FAMILIES}
