"""The neuron-monitor report: daemon snapshots (neurontools.contract) in, report objects and their
exact JSON bytes out.

The names below are imported on first use, so that importing one light module of this package
(``fields``: a table) does not import the report builder.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from neurontools.report.builder import ReportBuilder, build_report
    from neurontools.report.encoding import encode_report, format_float

_HOMES = {
    "ReportBuilder": "builder",
    "build_report": "builder",
    "encode_report": "encoding",
    "format_float": "encoding",
}

__all__ = [
    "ReportBuilder",
    "build_report",
    "encode_report",
    "format_float",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
