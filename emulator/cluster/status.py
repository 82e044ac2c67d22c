"""What ``neuron-emulator cluster status`` shows: the state file's nodes, each asked live whether its
daemon answers (and what it holds) and whether its exporter is ready. A node taken down by
``fault node-down`` has ``down: true`` (the state file's) and answers nothing."""

from __future__ import annotations

import http.client
import time
from dataclasses import asdict
from typing import Any

from emulator.cluster.state import ClusterState, NodeState
from neurontools.contract.inventory import RUNTIME
from neurontools.sources.address import parse_address
from neurontools.sources.daemon_client import DaemonClient, DaemonError, DaemonUnavailable

PROBE_TIMEOUT_S = 2.0


def exporter_ready(port: int, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Does the exporter on 127.0.0.1:``port`` answer ``/readyz`` with 200 (it has read its daemon)?"""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/readyz")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def daemon_status(address: str, timeout: float = PROBE_TIMEOUT_S) -> dict[str, Any] | None:
    """The node daemon's ``/status``, None when it does not answer."""
    try:
        status = DaemonClient(parse_address(address), timeout=timeout).get("/status")
    except (DaemonUnavailable, DaemonError):
        return None
    return status if isinstance(status, dict) else None


def node_status(node: NodeState) -> dict[str, Any]:
    """The node's state-file entry and, asked now: daemon up, cores in use, runtime processes,
    exporter ready."""
    entry: dict[str, Any] = asdict(node)
    client = DaemonClient(parse_address(node.address), timeout=PROBE_TIMEOUT_S)
    try:
        status = client.get("/status")
        processes = client.get("/processes")
    except (DaemonUnavailable, DaemonError):
        entry.update(daemon_up=False, neuroncores_in_use=None, neuroncores_total=None, processes=None)
    else:
        entry.update(
            daemon_up=True,
            neuroncores_in_use=status["neuroncores_in_use"],
            neuroncores_total=status["neuroncores_total"],
            processes=sum(1 for p in processes if p.get("kind") == RUNTIME),
        )
    entry["exporter_ready"] = exporter_ready(node.exporter_port)
    return entry


def cluster_status(state: ClusterState, *, probe: bool = True) -> dict[str, Any]:
    """The whole cluster, as ``cluster status --json`` prints it (``probe=False``: the state file's
    facts only, without asking the nodes)."""
    return {
        "pid": state.pid,
        "instance_type": state.instance_type,
        "region": state.region,
        "availability_zone": state.availability_zone,
        "subnet_id": state.subnet_id,
        "placement_group": state.placement_group,
        "started_at": state.started_at,
        "uptime_seconds": round(time.time() - state.started_at, 3),
        "file_sd": state.file_sd,
        "log": state.log,
        "nodes": [{**(node_status(node) if probe else asdict(node)), "pid": state.pid} for node in state.nodes],
    }


def _cores(node: dict[str, Any]) -> str:
    if not node["daemon_up"]:
        return "down"
    return f"{node['neuroncores_in_use']}/{node['neuroncores_total']}"


def render_table(status: dict[str, Any]) -> list[str]:
    """``cluster status`` without ``--json``: a summary, then one row per node (with the live
    columns when the nodes were asked)."""
    nodes = status["nodes"]
    lines = [
        f"cluster:     {len(nodes)} x {status['instance_type']}, host pid {status['pid']}, "
        f"up {status['uptime_seconds']:.0f} s",
        f"placement:   {status['availability_zone']} ({status['region']}), {status['subnet_id']}, "
        f"placement group {status['placement_group']}",
        f"targets:     {status['file_sd']} (Prometheus file_sd)",
    ]
    if status["log"]:
        lines.append(f"log:         {status['log']}")
    live = all("daemon_up" in n for n in nodes)
    rows = [["NODE", "INSTANCE ID", "DAEMON ADDRESS (NEURON_EMULATOR_ADDR)", "EXPORTER"]]
    if live:
        rows[0] += ["CORES", "PROCS"]
    for n in nodes:
        row = [str(n["index"]), n["instance_id"], n["address"], n["exporter_url"]]
        if live:
            if n.get("down"):
                row[3] += " (node down)"
            elif not n["exporter_ready"]:
                row[3] += " (not ready)"
            row += [_cores(n), "-" if n["processes"] is None else str(n["processes"])]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [c.rjust(w) if i >= 4 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
    return lines
