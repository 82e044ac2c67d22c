"""Physical figures that carry their provenance.

Every number of the hardware catalog is a :class:`Sourced`: the value in the unit the source
states, the source id(s) listed in docs/reference/sources.md (ids A*, P*, S*, W*, I* and the
evidence kinds NT-*), and a note for conflicts or derivations. :attr:`Sourced.base` converts
to one base unit per quantity (bytes, bytes/s, seconds, Hz, FLOP/s, plain counts).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# Source ids with short titles; docs/reference/sources.md gives each one's title and location. The
# evidence kinds of the tools' interfaces are prefixed "NT-" to keep them apart.
SOURCES: dict[str, str] = {
    "A1": "Trn1/Trn1n instance table (trn1-arch.rst)",
    "A2": "Trainium chip summary (trainium.rst)",
    "A3": "NeuronCore-v2 engines (neuron-core-v2.rst)",
    "A4": "NKI architecture guide",
    "A5": "NKI memory-hierarchy overview",
    "A6": "NKI DMA overview",
    "A7": "NKI DMA bandwidth guide",
    "A8": "Trainium2 page, Trainium-vs-Trainium2 comparison",
    "A9": "Trn1 topology / server diagrams",
    "A10": "runtime performance tips, NUMA / neuron-ls tables",
    "A11": "runtime developer guide, neuron-ls --topology",
    "A12": "trn1.2xlarge neuron-ls samples",
    "A13": "Neuron tools user guides",
    "A16": "runtime configuration guide",
    "A18": "device memory deep-dive",
    "A20": "collectives docs",
    "A21": "nccom-test examples (2023)",
    "A26": "EFA device counts",
    "A27": "16 GB per NeuronCore (NxD-Inference guides)",
    "I1": "a real trn1 out-of-memory log (aws-neuron-sdk issue 1014)",
    "S0": "AWS What's New (2022-10)",
    "S2": "AWS News Blog GA post",
    "S3": "re:Invent 2022 Trainium deck",
    "W1": "ec2instances.info issue 686 (NVMe)",
    "W2": "EC2 Capacity Blocks pricing page",
    "NT-D": "aws-neuron-sdk docs (evidence kind D)",
    "NT-S": "Neuron kernel driver source (evidence kind S)",
    "NT-O": "real captured output (evidence kind O)",
}


def cite(*ids: str) -> str:
    """``cite("A4")`` -> ``"[A4] NKI architecture guide"``; several ids are joined with ``"; "``."""
    if not ids:
        raise ValueError("cite() needs at least one source id")
    unknown = [i for i in ids if i not in SOURCES]
    if unknown:
        raise ValueError(f"unknown source id(s) {unknown}; known: {sorted(SOURCES)}")
    return "; ".join(f"[{i}] {SOURCES[i]}" for i in ids)


# unit -> (base unit, factor to base)
UNITS: dict[str, tuple[str, float]] = {
    "count": ("count", 1),
    "x": ("count", 1),  # a dimensionless factor
    "cycles": ("cycles", 1),
    "elements/cycle": ("elements/cycle", 1),
    "GHz": ("Hz", 1e9),
    "TFLOPS": ("FLOP/s", 1e12),
    "TOPS": ("OP/s", 1e12),
    "B": ("B", 1),
    "KB": ("B", 1e3),
    "KiB": ("B", 2**10),
    "MB": ("B", 1e6),
    "MiB": ("B", 2**20),
    "GB": ("B", 1e9),
    "GiB": ("B", 2**30),
    "GB/s": ("B/s", 1e9),
    "GiB/s": ("B/s", 2**30),
    "TB/s": ("B/s", 1e12),
    "Gbps": ("B/s", 1e9 / 8),
    "us": ("s", 1e-6),
    "s": ("s", 1),
}


@dataclass(frozen=True)
class Sourced:
    """A figure with its unit and provenance."""

    value: float | int
    unit: str
    source: str
    note: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.value, bool) or not isinstance(self.value, int | float):
            raise TypeError(f"Sourced.value must be a number, got {self.value!r}")
        if self.unit not in UNITS:
            raise ValueError(f"unknown unit {self.unit!r}; known: {sorted(UNITS)}")
        if not self.source.strip():
            raise ValueError("Sourced.source must not be empty")

    @property
    def base_unit(self) -> str:
        return UNITS[self.unit][0]

    @property
    def base(self) -> float:
        """The value in the base unit (bytes, bytes/s, s, Hz, FLOP/s, count)."""
        return self.value * UNITS[self.unit][1]

    def __float__(self) -> float:
        return float(self.value)

    def __str__(self) -> str:
        return f"{self.value:g} {self.unit}"


def iter_sourced(obj: Any, prefix: str = "") -> Iterator[tuple[str, Sourced]]:
    """Yield ``(dotted path, figure)`` for every :class:`Sourced` reachable through dataclass
    fields, tuples and mappings of ``obj``."""
    if isinstance(obj, Sourced):
        yield prefix, obj
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from iter_sourced(getattr(obj, f.name), f"{prefix}.{f.name}" if prefix else f.name)
    elif isinstance(obj, tuple | list):
        for i, item in enumerate(obj):
            yield from iter_sourced(item, f"{prefix}[{i}]")
    elif isinstance(obj, dict):
        for key, item in obj.items():
            yield from iter_sourced(item, f"{prefix}[{key!r}]")
