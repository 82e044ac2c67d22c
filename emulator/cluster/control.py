"""The client side of a running cluster: which node is where, and asking its host to take a node
down or bring it back (the host's side: ``fleet.py``). Light: no torch, no FastAPI.

Every error is a :class:`neurontools.cli.CliError` of one line (exit 1), as the commands print it.
"""

from __future__ import annotations

import os
from typing import Any

from emulator.cluster.layout import Layout
from emulator.cluster.state import ClusterState, NodeState, StateError, host_alive, read_state
from neurontools.cli import CliError
from neurontools.sources.address import DaemonAddress, parse_address
from neurontools.sources.daemon_client import DaemonClient, DaemonError, DaemonUnavailable

CONTROL_TIMEOUT_S = 30.0  # a node goes down within a few seconds (its servers' graceful shutdown: 2 s)


def running_cluster(layout: Layout | None = None, *, why: str = "") -> ClusterState:
    """The running cluster's state; CliError when none runs (``why``: what needed one)."""
    layout = layout or Layout.default()
    try:
        state = read_state(layout)
    except StateError as exc:
        raise CliError(str(exc)) from None
    need = f"{why} needs one: 'neuron-emulator cluster up --nodes N'" if why else ""
    if state is None:
        raise CliError(f"no cluster running (no state file {layout.state_file})" + (f"; {need}" if need else ""))
    if not host_alive(state):
        raise CliError(
            f"no cluster running: its host (pid {state.pid}) is gone; "
            "'neuron-emulator cluster down' removes what it left"
        )
    return state


def node_of(state: ClusterState, index: int) -> NodeState:
    """Node ``index`` of the cluster; CliError when it has no such node."""
    if not 0 <= index < len(state.nodes):
        raise CliError(f"--node {index}: the cluster has {len(state.nodes)} node(s), 0-{len(state.nodes) - 1}")
    return state.nodes[index]


def node_address(index: int, layout: Layout | None = None) -> DaemonAddress:
    """The daemon address of node ``index`` of the running cluster (``--node N``); a node that is
    down is an error that says how it comes back."""
    node = node_of(running_cluster(layout, why="--node"), index)
    if node.down:
        raise CliError(
            f"node {index} is down (neuron-emulator fault node-down); "
            f"'neuron-emulator cluster node-up --node {index}' brings it back"
        )
    return parse_address(node.address)


def node_at(address: DaemonAddress, layout: Layout | None = None) -> tuple[ClusterState, NodeState] | None:
    """The running cluster's node whose daemon is at ``address``, None when it is no node of it."""
    layout = layout or Layout.default()
    if address.socket_path is None:
        return None  # nodes listen on Unix sockets only
    try:
        state = read_state(layout)
    except StateError:
        return None
    if state is None or not host_alive(state):
        return None
    wanted = os.path.realpath(address.socket_path)
    for node in state.nodes:
        if os.path.realpath(node.address) == wanted:
            return state, node
    return None


def _control(layout: Layout, method: str, path: str) -> Any:
    client = DaemonClient(DaemonAddress(socket_path=layout.control_socket), timeout=CONTROL_TIMEOUT_S)
    try:
        return client.request(method, path)
    except DaemonUnavailable as exc:
        raise CliError(f"the cluster host does not answer at {layout.control_socket} ({exc.reason})") from None
    except DaemonError as exc:
        raise CliError(f"the cluster host refused: {exc}") from None


def take_down(index: int, layout: Layout | None = None) -> dict[str, Any]:
    """Ask the host to take node ``index`` down; its answer (``killed``: the processes it killed)."""
    layout = layout or Layout.default()
    node_of(running_cluster(layout, why="node-down"), index)
    answer: dict[str, Any] = _control(layout, "POST", f"/nodes/{index}/down")
    return answer


def bring_up(index: int, layout: Layout | None = None) -> dict[str, Any]:
    """Ask the host to bring node ``index`` back (a new daemon and exporter)."""
    layout = layout or Layout.default()
    node_of(running_cluster(layout, why="node-up"), index)
    answer: dict[str, Any] = _control(layout, "POST", f"/nodes/{index}/up")
    return answer
