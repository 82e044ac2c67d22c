"""The neuron-monitor report: daemon snapshots in, report objects and their exact JSON bytes out.

The names below are imported on first use, so that importing one light module of this package
(``schema``, ``json_values``: constants and plain functions, used by training processes and
command-line tools) does not import the report builder and the snapshot's validation (pydantic).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from neurontools.report.builder import ReportBuilder, build_report
    from neurontools.report.encoding import encode_report, format_float
    from neurontools.report.snapshot import Snapshot, SnapshotError, fetch_snapshot, snapshot_from_dict

_HOMES = {
    "ReportBuilder": "builder",
    "build_report": "builder",
    "encode_report": "encoding",
    "format_float": "encoding",
    "Snapshot": "snapshot",
    "SnapshotError": "snapshot",
    "fetch_snapshot": "snapshot",
    "snapshot_from_dict": "snapshot",
}

__all__ = [
    "ReportBuilder",
    "Snapshot",
    "SnapshotError",
    "build_report",
    "encode_report",
    "fetch_snapshot",
    "format_float",
    "snapshot_from_dict",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
