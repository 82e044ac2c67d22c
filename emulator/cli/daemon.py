"""``neuron-emulator up``, ``down`` and ``status``: start, stop and inspect the emulated instance's
daemon (docs/security.md for who may connect)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import socket
import time
from typing import Any

from emulator.cli.args import (
    Handler,
    add_daemon_address,
    add_identity_flags,
    add_instance_type,
    daemon_address,
    identity_argv,
    location,
)
from emulator.cli.detach import last_line, open_log, spawn
from emulator.cli.fault import status_lines
from neurontools.cli import CliError, UsageError
from neurontools.sources.address import DaemonAddress, private_runtime_dir, runtime_dir
from neurontools.sources.daemon_client import DaemonClient, DaemonUnavailable

PROG = "neuron-emulator"
DETACH_TIMEOUT_S = 30.0
DOWN_TIMEOUT_S = 10.0


def add_up(sub: Any) -> dict[str, Handler]:
    up = sub.add_parser("up", help="start the emulated instance daemon")
    add_instance_type(up, "trn1.2xlarge")
    up.add_argument("--detach", "-d", action="store_true", help="run in the background; return once it answers")
    where = up.add_mutually_exclusive_group()
    where.add_argument("--socket", metavar="PATH", help="listen on this Unix socket")
    where.add_argument("--port", type=int, metavar="N", help="listen on 127.0.0.1:N instead of a socket")
    up.add_argument(
        "--bind",
        metavar="ADDR",
        help="with --port: listen on this IP address (e.g. 0.0.0.0) instead of 127.0.0.1; "
        "changes still need the bearer token",
    )
    up.add_argument(
        "--socket-group",
        metavar="GROUP",
        help="make the socket 0660 for this group (default 0600: only you)",
    )
    up.add_argument(
        "--log-file",
        metavar="PATH",
        help="with --detach: daemon log (default <socket>.log, or neuron-emulator-<port>.log in the runtime directory)",
    )
    ident = up.add_argument_group("instance identity (defaults are stable per host, type and address)")
    add_identity_flags(ident, instance=True)
    return {"up": _cmd_up}


def add_down_status(sub: Any) -> dict[str, Handler]:
    for name, text in (
        ("down", "stop the daemon"),
        ("status", "show whether a daemon runs and what it holds"),
    ):
        p = sub.add_parser(name, help=text)
        add_daemon_address(p)
        if name == "status":
            p.add_argument("--json", action="store_true", help="print the daemon's status object as JSON")
    return {"down": _cmd_down, "status": _cmd_status}


def _up_address(args: argparse.Namespace) -> tuple[DaemonAddress, int | None]:
    """The client address of the daemon ``up`` starts, and the gid of ``--socket-group``."""
    if args.socket_group is not None and args.port is not None:
        raise UsageError("--socket-group applies to a Unix socket: not allowed with --port")
    gid = None
    if args.socket_group is not None:
        from emulator.daemon.security import SecurityError, resolve_group

        try:
            gid = resolve_group(args.socket_group)
        except SecurityError as exc:
            raise UsageError(str(exc)) from None
    address = daemon_address(args)
    if args.bind is None:
        return address, gid
    if args.port is None:
        raise UsageError("--bind needs --port (it is the TCP address to listen on)")
    try:
        ip = ipaddress.ip_address(args.bind)
    except ValueError:
        raise UsageError(f"--bind {args.bind}: expected an IP address such as 127.0.0.1 or 0.0.0.0") from None
    # clients on this host reach a wildcard bind over loopback (docs/security.md)
    host = ("::1" if ip.version == 6 else "127.0.0.1") if ip.is_unspecified else str(ip)
    return DaemonAddress(host=host, port=args.port), gid


# ------------------------------------------------------------------------------------------------
def _cmd_up(args: argparse.Namespace) -> int:
    address, gid = _up_address(args)
    if args.detach:
        return _up_detached(args, address)

    from emulator.daemon.registry import Registry
    from emulator.daemon.server import StartError, serve
    from emulator.hardware.identity import make_identity
    from emulator.hardware.inventory import build_inventory

    try:
        identity = make_identity(
            args.instance_type,
            seed=f"{socket.gethostname()}|{args.instance_type}|{address}",
            instance_id=args.instance_id,
            instance_name=args.instance_name,
            **location(args),
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None
    registry = Registry(build_inventory(args.instance_type, identity))
    try:
        serve(address, registry, bind=args.bind, socket_group=gid)
    except StartError as exc:
        raise CliError(str(exc)) from None
    return 0


def _up_detached(args: argparse.Namespace, address: DaemonAddress) -> int:
    from emulator.daemon.server import already_running_error, probe

    status = probe(address)
    if status:
        raise CliError(str(already_running_error(address, status)))
    log_path = _log_path(args, address)
    with open_log(log_path) as log:  # for the child
        child = spawn(_child_argv(args, address), log)
    deadline = time.monotonic() + DETACH_TIMEOUT_S
    while time.monotonic() < deadline:
        status = probe(address, timeout=1.0)
        if status and status.get("daemon_pid") == child.pid:
            print(
                f"{PROG}: {status.get('instance_type')} {status.get('instance_id')} up at {address} "
                f"(pid {child.pid}, log {log_path})"
            )
            return 0
        if child.poll() is not None:
            raise CliError(last_line(log_path) or f"daemon exited with status {child.returncode}")
        time.sleep(0.05)
    child.terminate()
    raise CliError(f"daemon did not answer at {address} within {DETACH_TIMEOUT_S:g} s (log: {log_path})")


def _child_argv(args: argparse.Namespace, address: DaemonAddress) -> list[str]:
    """The foreground ``up`` the detached child runs: at the address this process resolved, with
    the same identity."""
    argv = ["up", "--instance-type", args.instance_type]
    argv += ["--socket", address.socket_path] if address.socket_path else ["--port", str(address.port)]
    for flag, value in (("--bind", args.bind), ("--socket-group", args.socket_group)):
        if value is not None:
            argv += [flag, value]
    return argv + identity_argv(args, instance=True)


def _log_path(args: argparse.Namespace, address: DaemonAddress) -> str:
    """``--log-file``, else beside the socket (or in the runtime directory), that directory checked."""
    if args.log_file:
        return str(args.log_file)
    log_path = (
        address.socket_path + ".log"
        if address.socket_path
        else os.path.join(runtime_dir(), f"neuron-emulator-{address.port}.log")
    )
    from emulator.daemon.security import SecurityError, ensure_runtime_dir

    directory = os.path.dirname(log_path)
    if os.path.isdir(directory) or directory == private_runtime_dir():
        try:
            ensure_runtime_dir(directory)
        except SecurityError as exc:
            raise CliError(str(exc)) from None
    return log_path


def _client(args: argparse.Namespace) -> tuple[DaemonAddress, DaemonClient]:
    """The daemon of ``--socket``/``--port`` (else NEURON_EMULATOR_ADDR) and a client of it."""
    address = daemon_address(args)
    return address, DaemonClient(address, timeout=3.0)


def _cmd_down(args: argparse.Namespace) -> int:
    address, client = _client(args)
    try:
        status = client.get("/status")
    except DaemonUnavailable as exc:
        raise CliError(f"no daemon running at {address} ({exc.reason})") from None
    pid = int(status["daemon_pid"])
    _refuse_cluster_node(address, pid)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    except PermissionError:
        raise CliError(f"not allowed to stop daemon pid {pid}") from None
    deadline = time.monotonic() + DOWN_TIMEOUT_S
    while time.monotonic() < deadline:
        if not _pid_alive(pid):
            print(f"{PROG}: stopped daemon pid {pid} at {address}")
            return 0
        time.sleep(0.05)
    raise CliError(f"daemon pid {pid} did not stop within {DOWN_TIMEOUT_S:g} s")


def _refuse_cluster_node(address: DaemonAddress, pid: int) -> None:
    """A cluster node's daemon is served by the cluster's host: stopping that process would stop
    every node. Say what stops the cluster, or this node (docs/cluster.md)."""
    from emulator.cluster.control import node_at

    found = node_at(address)
    if found is not None and found[0].pid == pid:
        state, node = found
        raise CliError(
            f"{address} is node {node.index} of a cluster of {len(state.nodes)} nodes (host pid {pid}): "
            f"'neuron-emulator cluster down' stops the cluster, 'neuron-emulator fault node-down --node {node.index}' "
            "this node"
        )
    import psutil

    try:
        argv = psutil.Process(pid).cmdline()
    except psutil.Error:
        return
    if "cluster" in argv and "up" in argv[argv.index("cluster") :]:  # a host of another runtime directory
        raise CliError(
            f"the daemon at {address} is a node of a cluster (host pid {pid}): stop the cluster with "
            "'neuron-emulator cluster down' (with its XDG_RUNTIME_DIR)"
        )


def _pid_alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _cmd_status(args: argparse.Namespace) -> int:
    import json

    address, client = _client(args)
    try:
        status = client.get("/status")
        processes = client.get("/processes")
    except DaemonUnavailable as exc:
        print(f"{PROG}: no daemon running at {address} ({exc.reason})")
        return 1
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    print(f"daemon:        running, pid {status['daemon_pid']}, up {status['uptime_seconds']:.0f} s")
    print(f"address:       {status['address']}")
    print(f"instance:      {status['instance_type']} {status['instance_id']}")
    print(f"neuroncores:   {status['neuroncores_in_use']} of {status['neuroncores_total']} in use")
    print(f"processes:     {len(processes)}")
    for proc in processes:
        cores = proc["neuroncores"]
        where = f"nc{cores[0]}-nc{cores[-1]}" if cores else proc["kind"]
        print(f"  {proc['pid']:>7}  {where:<10} {proc['tag'][:20]:<20} {proc['command'][:60]}")
    faults = status_lines(client)
    if faults:
        print("faults:        (neuron-emulator fault clear removes them)")
        print("\n".join(faults))
    return 0
