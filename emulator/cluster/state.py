"""The cluster's state file and its Prometheus ``file_sd`` target file.

The host writes both once every node's daemon and exporter listen, and removes them when it stops;
it writes the state file again when a node goes down or comes back (``NodeState.down``). A node
that is down keeps its target: Prometheus then sees ``up == 0`` for it.
The state file (``Layout.state_file``, 0600) says which host process serves which nodes where; the
target file is Prometheus' ``file_sd`` format: one target group per node, the exporter's
``host:port`` with labels ``node``, ``instance_id`` and ``placement_group``.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any, TypeVar

from emulator.cluster.layout import Layout

STATE_VERSION = 1
_T = TypeVar("_T")


class StateError(ValueError):
    """A state file that cannot be read; the message names the file."""


@dataclass(frozen=True)
class NodeState:
    index: int
    instance_id: str
    instance_type: str
    instance_name: str
    address: str  # the daemon's NEURON_EMULATOR_ADDR
    exporter_url: str  # http://127.0.0.1:PORT/metrics
    exporter_port: int
    down: bool = False  # taken down by `neuron-emulator fault node-down` (its daemon and exporter stopped)


@dataclass(frozen=True)
class ClusterState:
    pid: int  # the cluster host
    started_at: float
    instance_type: str
    region: str
    availability_zone: str
    subnet_id: str
    placement_group: str
    file_sd: str
    log: str | None
    nodes: tuple[NodeState, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, **asdict(self), "nodes": [asdict(n) for n in self.nodes]}

    @classmethod
    def from_dict(cls, data: Any) -> ClusterState:
        """Raises ``KeyError``, ``TypeError`` or ``ValueError`` for anything malformed."""
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise ValueError(f"not a version {STATE_VERSION} cluster state")
        return _load(cls, data, nodes=tuple(_node(n) for n in data["nodes"]))


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {value!r}")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _opt_str(value: Any) -> str | None:
    return None if value is None else _str(value)


# a field's checked reading, by its annotation (``from __future__ import annotations``: a string)
_READERS: dict[str, Callable[[Any], Any]] = {
    "int": _int,
    "float": float,
    "bool": _bool,
    "str": _str,
    "str | None": _opt_str,
}


def _load(cls: type[_T], data: dict[str, Any], **given: Any) -> _T:
    """``cls`` from ``data``: each field not ``given`` read by its type; a field with a default may be absent."""
    values = dict(given)
    for f in fields(cls):  # type: ignore[arg-type]  # _T: a dataclass of this module
        if f.name not in given:
            present = f.name in data or f.default is MISSING
            values[f.name] = _READERS[str(f.type)](data[f.name]) if present else f.default
    return cls(**values)


def _node(data: Any) -> NodeState:
    if not isinstance(data, dict):
        raise TypeError(f"expected a node object, got {data!r}")
    return _load(NodeState, data)


def host_alive(state: ClusterState) -> bool:
    """Is the state file's host still running (the same process, not a later one with its PID)?"""
    import psutil

    try:
        proc = psutil.Process(state.pid)
        return proc.status() != psutil.STATUS_ZOMBIE and proc.create_time() <= state.started_at + 1.0
    except psutil.Error:
        return False


def write_json(path: str, data: Any) -> None:
    """Write ``data`` to ``path`` (0600) so that a reader sees the old file or the new one, whole."""
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_state(layout: Layout) -> ClusterState | None:
    """The state file's cluster, None when there is none. Raises :class:`StateError`."""
    try:
        with open(layout.state_file, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StateError(f"cannot read cluster state {layout.state_file}: {exc}") from None
    try:
        return ClusterState.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise StateError(f"malformed cluster state {layout.state_file}: {exc}") from None


def file_sd_targets(state: ClusterState) -> list[dict[str, Any]]:
    """Prometheus ``file_sd`` target groups: one per node's exporter."""
    return [
        {
            "targets": [f"127.0.0.1:{node.exporter_port}"],
            "labels": {
                "node": str(node.index),
                "instance_id": node.instance_id,
                "placement_group": state.placement_group,
            },
        }
        for node in state.nodes
    ]


def remove_files(state: ClusterState, layout: Layout) -> list[str]:
    """Remove the state file and the target file (what the host leaves when it is killed); the
    paths that were there."""
    removed = []
    for path in (state.file_sd, layout.state_file):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed.append(path)
    return removed
