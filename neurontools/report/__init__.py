"""The neuron-monitor report: daemon snapshots in, report objects and their exact JSON bytes out."""

from neurontools.report.builder import ReportBuilder, build_report
from neurontools.report.encoding import encode_report, format_float
from neurontools.report.snapshot import Snapshot, SnapshotError, fetch_snapshot, snapshot_from_dict

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
