"""``neuron-emulator cluster up|status|down``: an emulated fleet of Trn1 nodes (docs/cluster.md).

    neuron-emulator cluster up --nodes N [--instance-type T] [--detach] [--exporter-port-base P] ...
    neuron-emulator cluster status [--json]
    neuron-emulator cluster node-up --node N     # a node taken down by `fault node-down`, back
    neuron-emulator cluster down

Errors as the rest of ``neuron-emulator``: one line on stderr; exit 2 for a flag that cannot be
used, 1 for anything else (a cluster already running, none running, a start that failed).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import time
from typing import Any

from emulator.cli.args import (
    Handler,
    add_identity_flags,
    add_instance_type,
    identity_argv,
    interval_seconds,
    location,
    node_count,
    node_index,
    port_base,
)
from emulator.cli.detach import last_line, open_log, spawn
from emulator.cluster.cleanup import remove_leftovers
from emulator.cluster.layout import Layout
from emulator.cluster.nodes import (
    DEFAULT_INSTANCE_TYPE,
    DEFAULT_PLACEMENT_GROUP,
    MAX_NODES,
    MIN_NODES,
    NodeSpec,
    Shared,
    plan_nodes,
    shared_identity,
)
from emulator.cluster.state import ClusterState, StateError, read_state
from emulator.cluster.status import cluster_status, daemon_status, exporter_ready, render_table
from neurontools.cli import CliError, RaisingParser, UsageError, silence_stdout

PROG = "neuron-emulator"
DETACH_TIMEOUT_S = 120.0  # 64 nodes start in well under this on a 2-vCPU host (docs/cluster.md)
DOWN_TIMEOUT_S = 30.0
NODE_UP_TIMEOUT_S = 10.0


def add(subparsers: Any) -> dict[str, Handler]:
    """``cluster`` with ``up``, ``status``, ``down`` and ``node-up``."""
    cluster = subparsers.add_parser(
        "cluster",
        help="an emulated fleet: N nodes, each with its own daemon and neuron-exporter, in one process",
        description="Emulated Trn1 cluster: every node has its own instance identity, daemon address "
        "(NEURON_EMULATOR_ADDR) and neuron-exporter endpoint; one host process serves them all (docs/cluster.md).",
    )
    sub = cluster.add_subparsers(dest="cluster_command", metavar="COMMAND", parser_class=RaisingParser)
    sub.required = True
    _add_up(sub.add_parser("up", help="start a cluster (one at a time per user)"))
    status = sub.add_parser("status", help="the nodes, their addresses and exporters (exit 1 if no cluster runs)")
    status.add_argument("--json", action="store_true", help="print the cluster and its nodes as JSON")
    sub.add_parser("down", help="stop the cluster; its state, sockets and target file are removed")
    node_up = sub.add_parser(
        "node-up",
        help="bring back a node taken down by 'neuron-emulator fault node-down' (a new daemon and exporter)",
    )
    node_up.add_argument("--node", type=node_index, required=True, metavar="N", help="the node's index")
    return {"cluster": cmd_cluster}


def _add_up(up: argparse.ArgumentParser) -> None:
    up.add_argument("--nodes", "-n", type=node_count, required=True, metavar="N", help=f"{MIN_NODES}-{MAX_NODES} nodes")
    add_instance_type(up, DEFAULT_INSTANCE_TYPE)
    up.add_argument("--detach", "-d", action="store_true", help="run in the background; return once every node answers")
    up.add_argument(
        "--exporter-port-base",
        type=port_base,
        default=0,
        metavar="P",
        help="node i's neuron-exporter on 127.0.0.1:P+i (default: ports the kernel picks; see status)",
    )
    up.add_argument(
        "--exporter-interval",
        type=interval_seconds,
        default=1.0,
        metavar="SECONDS",
        help="each exporter's collection interval (default 1)",
    )
    up.add_argument(
        "--file-sd",
        metavar="PATH",
        help="write the Prometheus file_sd target file here (default: in the cluster's socket directory)",
    )
    up.add_argument(
        "--log-file", metavar="PATH", help="with --detach: the host's log (default neuron-emulator-cluster.log)"
    )
    up.add_argument("--detached-log", help=argparse.SUPPRESS)  # the launcher tells the host where its log is
    ident = up.add_argument_group("identity shared by every node (defaults are stable per host and type)")
    add_identity_flags(ident, instance=False)
    ident.add_argument(
        "--placement-group", default=DEFAULT_PLACEMENT_GROUP, metavar="NAME", help=f"default {DEFAULT_PLACEMENT_GROUP}"
    )


def cmd_cluster(args: argparse.Namespace) -> int:
    handlers: dict[str, Handler] = {"up": _cmd_up, "status": _cmd_status, "down": _cmd_down, "node-up": _cmd_node_up}
    return handlers[args.cluster_command](args)


# -- up -------------------------------------------------------------------------------------------


def _plan(args: argparse.Namespace, layout: Layout) -> tuple[Shared, list[NodeSpec], str]:
    """The shared identity, the nodes and the target file's path; bad values are one-line errors."""
    if args.exporter_port_base and args.exporter_port_base + args.nodes - 1 > 65535:
        raise UsageError(
            f"--exporter-port-base {args.exporter_port_base}: {args.nodes} nodes need ports up to "
            f"{args.exporter_port_base + args.nodes - 1} (at most 65535)"
        )
    try:
        shared = shared_identity(
            args.instance_type,
            layout,
            placement_group=args.placement_group,
            **location(args),
        )
        nodes = plan_nodes(shared, args.nodes, layout)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    file_sd = os.path.abspath(args.file_sd) if args.file_sd else layout.file_sd
    if args.file_sd and not os.path.isdir(os.path.dirname(file_sd)):
        raise CliError(f"--file-sd {args.file_sd}: directory {os.path.dirname(file_sd)} does not exist")
    return shared, nodes, file_sd


def _refuse_running(layout: Layout) -> None:
    from emulator.cluster.host import already_running, host_alive

    state = _state_or_none(layout)
    if state is not None and host_alive(state):
        raise CliError(already_running(state))


def _state_or_none(layout: Layout) -> ClusterState | None:
    try:
        return read_state(layout)
    except StateError as exc:
        raise CliError(str(exc)) from None


def _cmd_up(args: argparse.Namespace) -> int:
    if args.log_file and not args.detach:
        raise UsageError("--log-file applies to --detach (in the foreground the host logs to stderr)")
    layout = Layout.default()
    shared, nodes, file_sd = _plan(args, layout)
    _refuse_running(layout)
    if args.detach:
        return _up_detached(args, layout)

    from emulator.cluster.host import HostPlan, run_host
    from emulator.daemon.server import StartError

    plan = HostPlan(
        layout=layout,
        shared=shared,
        nodes=nodes,
        exporter_port_base=args.exporter_port_base,
        exporter_interval=args.exporter_interval,
        file_sd=file_sd,
        log=args.detached_log,
    )

    def ready(state: ClusterState) -> None:
        if args.detached_log is None:  # in the foreground: where the nodes are
            _print_lines(render_table(cluster_status(state, probe=False)))

    try:
        run_host(plan, on_ready=ready)
    except StartError as exc:
        raise CliError(str(exc)) from None
    return 0


def _host_argv(args: argparse.Namespace, log_path: str) -> list[str]:
    """The foreground ``cluster up`` the detached host runs: the same cluster, its log named."""
    argv = ["cluster", "up", "--nodes", str(args.nodes), "--instance-type", args.instance_type]
    argv += ["--exporter-port-base", str(args.exporter_port_base), "--exporter-interval", repr(args.exporter_interval)]
    argv += ["--placement-group", args.placement_group, "--detached-log", log_path]
    if args.file_sd:
        argv += ["--file-sd", os.path.abspath(args.file_sd)]
    return argv + identity_argv(args, instance=False)


def _up_detached(args: argparse.Namespace, layout: Layout) -> int:
    from emulator.daemon.security import SecurityError, ensure_runtime_dir
    from emulator.lifecycle import stop_on_signals

    log_path = os.path.abspath(args.log_file) if args.log_file else layout.log_file
    try:
        ensure_runtime_dir(layout.directory)
    except SecurityError as exc:
        raise CliError(str(exc)) from None
    log = open_log(log_path)
    with stop_on_signals():
        with log:
            host = spawn(_host_argv(args, log_path), log)  # detached: it outlives this command
        try:
            state = _wait_ready(host, layout, log_path)
        except BaseException:  # a failed start, a timeout, Ctrl-C: nothing of it stays behind
            _stop_host(host)
            raise
    summary = (
        f"{PROG}: cluster of {len(state.nodes)} {state.instance_type} nodes up "
        f"(host pid {host.pid}, log {log_path}); Prometheus targets in {state.file_sd}"
    )
    _print_lines([summary, *render_table(cluster_status(state))])
    return 0


def _wait_ready(host: subprocess.Popen[bytes], layout: Layout, log_path: str) -> ClusterState:
    """The host's state once every node's daemon answers and every exporter is ready."""
    deadline = time.monotonic() + DETACH_TIMEOUT_S
    waiting: list[int] | None = None  # nodes not answering yet
    while time.monotonic() < deadline:
        if host.poll() is not None:
            raise CliError(last_line(log_path) or f"the cluster host exited with status {host.returncode}")
        try:
            state = read_state(layout)
        except StateError:
            state = None  # being replaced
        if state is not None and state.pid == host.pid:
            if waiting is None:
                waiting = [node.index for node in state.nodes]
            waiting = [
                i
                for i in waiting
                if daemon_status(state.nodes[i].address, timeout=1.0) is None
                or not exporter_ready(state.nodes[i].exporter_port, timeout=1.0)
            ]
            if not waiting:
                return state
        time.sleep(0.1)
    where = f" (nodes not answering: {', '.join(map(str, waiting))})" if waiting else ""
    raise CliError(f"the cluster did not come up within {DETACH_TIMEOUT_S:g} s{where} (log: {log_path})")


def _stop_host(host: subprocess.Popen[bytes]) -> None:
    if host.poll() is None:
        host.terminate()
    try:
        host.wait(timeout=DOWN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        host.kill()
        host.wait()


def _print_lines(lines: list[str]) -> None:
    """``lines`` on stdout; a reader that went away (``| head``) is not an error."""
    try:
        print("\n".join(lines), flush=True)
    except BrokenPipeError:
        silence_stdout()


# -- status ---------------------------------------------------------------------------------------


def _cmd_status(args: argparse.Namespace) -> int:
    from emulator.cluster.host import host_alive

    layout = Layout.default()
    state = _state_or_none(layout)
    if state is None:
        print(f"{PROG}: no cluster running (no state file {layout.state_file})")
        return 1
    if not host_alive(state):
        print(
            f"{PROG}: no cluster running: its host (pid {state.pid}) is gone; "
            "'neuron-emulator cluster down' removes what it left"
        )
        return 1
    status = cluster_status(state)
    _print_lines(json.dumps(status, indent=2).splitlines() if args.json else render_table(status))
    return 0


# -- node-up --------------------------------------------------------------------------------------


def _cmd_node_up(args: argparse.Namespace) -> int:
    from emulator.cluster.control import bring_up, running_cluster

    bring_up(args.node)
    node = running_cluster().nodes[args.node]
    deadline = time.monotonic() + NODE_UP_TIMEOUT_S
    while not exporter_ready(node.exporter_port, timeout=1.0):  # it has read its new daemon
        if time.monotonic() > deadline:
            raise CliError(f"node {args.node} is up but its exporter at {node.exporter_url} is not ready")
        time.sleep(0.05)
    print(
        f"{PROG}: node {args.node} ({node.instance_id}) is up again: a new daemon at {node.address} "
        f"(no process, counters from zero) and exporter at {node.exporter_url}"
    )
    return 0


# -- down -----------------------------------------------------------------------------------------


def _cmd_down(args: argparse.Namespace) -> int:
    from emulator.cluster.host import host_alive

    layout = Layout.default()
    state = _state_or_none(layout)
    if state is None:
        raise CliError(f"no cluster running (no state file {layout.state_file})")
    if not host_alive(state):
        remove_leftovers(state, layout)
        print(f"{PROG}: the cluster's host (pid {state.pid}) was gone; removed its state, sockets and target file")
        return 0
    try:
        os.kill(state.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    except PermissionError:
        raise CliError(f"not allowed to stop the cluster host (pid {state.pid})") from None
    deadline = time.monotonic() + DOWN_TIMEOUT_S
    while host_alive(state):
        if time.monotonic() > deadline:
            raise CliError(f"the cluster host (pid {state.pid}) did not stop within {DOWN_TIMEOUT_S:g} s")
        time.sleep(0.05)
    remove_leftovers(state, layout)  # nothing, after a clean stop
    print(f"{PROG}: stopped the cluster of {len(state.nodes)} nodes (host pid {state.pid})")
    return 0
