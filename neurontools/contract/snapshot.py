"""Reading the daemon snapshot (``GET /v1/snapshot``, docs/snapshot.md) into its typed models.

The models are neurontools/contract/snapshot_models.py (``Snapshot``, the whole, is re-exported
here); validation is strict about everything a report is computed from and names the bad key, e.g.
``snapshot.processes[0].cores['1'].busy: expected a number, got 'x'`` (neurontools/contract/validation.py).
A snapshot of another schema version (``schema_version``, or none) is refused as a whole with one
error: the daemon and the tools ship together. Unknown keys are ignored.
"""

from __future__ import annotations

from collections import Counter
from typing import Any
from urllib.parse import quote

from neurontools.contract.json_values import describe, is_object
from neurontools.contract.reader import DaemonReader
from neurontools.contract.snapshot_models import SCHEMA_VERSION, SCHEMA_VERSION_EXPECTED, Snapshot
from neurontools.contract.validation import JsonValidator, SectionMemo

__all__ = [
    "SCHEMA_VERSION",
    "SNAPSHOT",
    "SNAPSHOT_PATH",
    "Snapshot",
    "SnapshotError",
    "SnapshotParser",
    "fetch_snapshot",
    "snapshot_from_dict",
]

SNAPSHOT_PATH = "/snapshot"


class SnapshotError(ValueError):
    """The snapshot is malformed; the message names the offending key."""


# validates, writes (the daemon) and describes (its OpenAPI schema) the snapshot
SNAPSHOT: JsonValidator[Snapshot] = JsonValidator(Snapshot, "snapshot", SnapshotError)


def check_schema_version(data: Any) -> None:
    """Refuse a snapshot of another schema version, or of none, before reading anything else."""
    if not is_object(data):
        return  # validation says what the document is
    version = data.get("schema_version")
    if type(version) is not int or version != SCHEMA_VERSION:
        got = "no schema_version" if "schema_version" not in data else describe(version)
        raise SnapshotError(f"snapshot.schema_version: expected {SCHEMA_VERSION_EXPECTED}, got {got}")


def snapshot_from_dict(data: Any, *, memo: SectionMemo | None = None) -> Snapshot:
    """Parse and validate one ``/v1/snapshot`` answer; raises ``SnapshotError`` naming the bad key.
    ``memo``: see ``SnapshotParser``."""
    check_schema_version(data)
    return SNAPSHOT.validate(data, memo)


class SnapshotParser:
    """``snapshot_from_dict`` for successive snapshots of one daemon, reusing what did not change.

    A process's memory and loaded models (most of its JSON: nested objects) change when tensors
    are allocated or a model is loaded, while its counters change every second: they are parsed
    again only when their JSON differs from the previous snapshot's (comparing is several times
    cheaper than parsing), else the previous objects are used, so consumers can tell "unchanged"
    by identity. Validation is the same: equal JSON parsed without error before. ``parsed``
    counts the sections parsed anew, by name (``memory``, ``loaded_models``).
    """

    def __init__(self) -> None:
        self._memo: SectionMemo | None = None
        self.parsed: Counter[str] = Counter()

    def parse(self, data: Any) -> Snapshot:
        memo = SectionMemo(self._memo)  # keeps only this snapshot's processes: exited ones are forgotten
        snapshot = snapshot_from_dict(data, memo=memo)
        self._memo = memo
        self.parsed.update(memo.parsed)
        return snapshot


def fetch_snapshot(
    client: DaemonReader, latencies_since: float | None = None, parser: SnapshotParser | None = None
) -> Snapshot:
    """One snapshot from the daemon (``GET /v1/snapshot``).

    ``latencies_since`` (daemon monotonic seconds, e.g. ``ReportBuilder.latencies_since()``) asks
    for the latency lists of executions that ended later only; without it they cover the daemon's
    whole window (ten minutes), which is most of a busy snapshot's size.
    ``parser`` (one per daemon) reuses what did not change since its previous snapshot.
    Raises ``DaemonUnavailable`` / ``DaemonError`` from the client and ``SnapshotError`` for a malformed answer.
    """
    # quoted: repr() of a large float has an exponent ("1e+16"), whose "+" a query reads as a space
    path = SNAPSHOT_PATH
    if latencies_since is not None:
        path += f"?latencies_since={quote(repr(latencies_since))}"
    data = client.get(path)
    return parser.parse(data) if parser is not None else snapshot_from_dict(data)
