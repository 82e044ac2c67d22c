"""The cluster host: one process serving every node's daemon and every node's neuron-exporter.

A node is what ``neuron-emulator up --socket <node socket>`` plus ``neuron-exporter`` against it
would be — the same daemon app, registry and access rules (``emulator/daemon``), the same
exporter app and collector (``neurontools/exporter``) reading the node's daemon over its socket —
but all nodes share one process, so 32 nodes cost one Python interpreter instead of 64.

Two event loops:

* the main thread's serves every node's daemon (a uvicorn server per Unix socket);
* the thread ``cluster-exporters`` serves every node's exporter (a uvicorn server per TCP port);
  each exporter's collector thread reads its daemon every interval.

The exporters have a loop of their own because their app's shutdown blocks: it joins its
collector thread and unregisters from the daemon over HTTP. On the daemons' loop those calls would
wait for answers that only that loop can give.

Stop: SIGINT, SIGTERM or SIGHUP. The exporters stop first (they unregister from their daemons),
then the daemons; the state file, the target file, the sockets and the lock go last.

One node at a time can go down and come back (``fleet.py``): the host's control socket, served in
the daemons' loop beside the nodes, takes the requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType

from fastapi import FastAPI

from emulator.cluster.fleet import CONTROL_KEY, Fleet, control_app, daemon_app, new_registry
from emulator.cluster.layout import Layout
from emulator.cluster.nodes import NodeSpec, Shared
from emulator.cluster.servers import ServerGroup
from emulator.cluster.state import (
    ClusterState,
    NodeState,
    file_sd_targets,
    host_alive,
    read_state,
    remove_files,
    write_json,
)
from emulator.daemon.security import PeerCredentialsProtocol, SecurityError, check_private_dir, ensure_runtime_dir
from emulator.daemon.server import StartError, exclusive_lock, listener
from emulator.lifecycle import STOP_SIGNALS, Stopped
from neurontools.cli import handle_signals
from neurontools.exporter.api import ExporterSpec, build_exporter, listen
from neurontools.sources.address import DaemonAddress

__all__ = ["HostPlan", "already_running", "host_alive", "run_host"]

PROG = "neuron-emulator"
EXPORTER_BIND = "127.0.0.1"
GRACEFUL_SHUTDOWN_S = 2.0


@dataclass(frozen=True)
class HostPlan:
    layout: Layout
    shared: Shared
    nodes: list[NodeSpec]
    exporter_port_base: int  # node i's exporter on base + i; 0: ports the kernel picks
    exporter_interval: float
    file_sd: str
    log: str | None


def _say(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


# -- one cluster per runtime directory ------------------------------------------------------------


def already_running(state: ClusterState) -> str:
    return (
        f"a cluster of {len(state.nodes)} {state.instance_type} nodes is already running (host pid {state.pid}); "
        "stop it with 'neuron-emulator cluster down'"
    )


@contextlib.contextmanager
def _cluster_lock(layout: Layout) -> Iterator[None]:
    """Hold the runtime directory's cluster lock; a state file left by a host that died is removed."""
    try:
        ensure_runtime_dir(layout.directory)
    except SecurityError as exc:
        raise StartError(str(exc)) from None

    def busy() -> StartError:
        state = _readable_state(layout)
        if state is not None and host_alive(state):
            return StartError(already_running(state))
        return StartError(f"another cluster is starting in {layout.directory}")

    with exclusive_lock(str(layout.lock_file), busy):
        stale = _readable_state(layout)
        if stale is not None:  # we hold the lock: its host is gone
            remove_files(stale, layout)
            _say(f"replaced the state of a cluster whose host (pid {stale.pid}) is gone")
        yield


def _readable_state(layout: Layout) -> ClusterState | None:
    from emulator.cluster.state import StateError

    try:
        return read_state(layout)
    except StateError:
        return None


def _node_dir(layout: Layout) -> None:
    """The nodes' socket directory, 0700 (an existing one must be ours and private)."""
    try:
        os.mkdir(layout.node_dir, 0o700)
    except FileExistsError:
        if os.path.islink(layout.node_dir):
            raise StartError(f"refusing to use {layout.node_dir}: a symbolic link") from None
        try:
            check_private_dir(layout.node_dir)
        except SecurityError as exc:
            raise StartError(str(exc)) from None
    except OSError as exc:
        raise StartError(f"cannot create directory {layout.node_dir}: {exc.strerror}") from None


# -- stop signals ---------------------------------------------------------------------------------


class _StopRequest:
    """The first stop signal: before the loop runs it unwinds the start (:class:`Stopped`); once it
    runs it sets the loop's stop event. Later signals are ignored: the stop is under way."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def attach(self, loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
        self._loop, self._event = loop, event
        if self.signum is not None:
            event.set()

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum is not None:
            return
        self.signum = signum
        if self._loop is None or self._event is None:
            raise Stopped(signum)
        self._loop.call_soon_threadsafe(self._event.set)


# -- the nodes ------------------------------------------------------------------------------------


def _exporter_app(node: NodeSpec, port: int, interval: float) -> FastAPI:
    """neuron-exporter's app for ``node``: what ``neuron-exporter --port PORT`` builds with
    ``NEURON_EMULATOR_ADDR`` set to the node's socket (neurontools/exporter/api.py), rendering at
    scrape time (many exporters share this process)."""
    command = f"neuron-exporter --port {port} (node {node.index})"  # within neuron-ls -a's 40 characters
    return build_exporter(ExporterSpec(node.address, interval, command, on_scrape=True))


def _exporter_socket(node: NodeSpec, port: int) -> socket.socket:
    """A listening socket for the node's exporter on ``port`` (0: one the kernel picks)."""
    try:
        return listen(EXPORTER_BIND, port)
    except OSError as exc:
        raise StartError(
            f"node {node.index}: cannot listen on {EXPORTER_BIND}:{port} for its exporter: {exc.strerror or exc}"
        ) from None


def _state(plan: HostPlan, ports: list[int], started_at: float) -> ClusterState:
    nodes = tuple(
        NodeState(
            index=node.index,
            instance_id=node.identity.instance_id,
            instance_type=node.identity.instance_type,
            instance_name=node.identity.instance_name,
            address=str(node.address),
            exporter_url=f"http://{EXPORTER_BIND}:{port}/metrics",
            exporter_port=port,
        )
        for node, port in zip(plan.nodes, ports, strict=True)
    )
    shared = plan.shared
    return ClusterState(
        pid=os.getpid(),
        started_at=started_at,
        instance_type=shared.instance_type,
        region=shared.region,
        availability_zone=shared.availability_zone,
        subnet_id=shared.subnet_id,
        placement_group=shared.placement_group,
        file_sd=plan.file_sd,
        log=plan.log,
        nodes=nodes,
    )


# -- running --------------------------------------------------------------------------------------


def run_host(plan: HostPlan, *, on_ready: Callable[[ClusterState], None] | None = None) -> None:
    """Serve every node until SIGINT/SIGTERM/SIGHUP. Raises :class:`StartError` when the cluster
    cannot start, :class:`Stopped` for a stop signal before it listens."""
    started_at = time.time()
    stop = _StopRequest()
    with handle_signals(stop, *STOP_SIGNALS), contextlib.ExitStack() as stack:
        stack.enter_context(_cluster_lock(plan.layout))
        _node_dir(plan.layout)
        stack.callback(_remove_node_dir, plan.layout)
        daemons, exporters = ServerGroup("daemons"), ServerGroup("exporters")
        fleet = Fleet(
            plan.layout,
            daemons,
            exporters,
            exporter_app=lambda node, port: _exporter_app(node, port, plan.exporter_interval),
            exporter_socket=lambda node, port: _exporter_socket(node, port),
        )
        stack.callback(fleet.close)  # sockets of nodes brought up again; after the servers stopped
        _add_daemons(plan, stack, daemons, fleet)
        ports = _add_exporters(plan, stack, exporters, fleet)
        state = _state(plan, ports, started_at)
        stack.callback(remove_files, state, plan.layout)  # before the sockets go, after the servers stopped

        def ready() -> None:
            write_json(plan.file_sd, file_sd_targets(state))
            fleet.publish(state)
            _say(
                f"cluster of {len(plan.nodes)} {state.instance_type} nodes up (pid {state.pid}): "
                f"state {plan.layout.state_file}, Prometheus targets {plan.file_sd}"
            )
            if on_ready is not None:
                on_ready(state)

        asyncio.run(_serve(daemons, exporters, stop, ready))
        _say(f"cluster stopped ({signal.Signals(stop.signum).name if stop.signum else 'done'})")


def _add_daemons(plan: HostPlan, stack: contextlib.ExitStack, daemons: ServerGroup, fleet: Fleet) -> None:
    """Every node's daemon on its Unix socket, and the host's control socket beside them."""
    for node in plan.nodes:
        sock, access = stack.enter_context(listener(node.address))  # removes the socket at exit
        registry = new_registry(node)
        daemons.add(
            node.index,
            daemon_app(node, registry, access),
            sock,
            http=PeerCredentialsProtocol,
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        )
        fleet.add(node, 0, registry)
    control, access = stack.enter_context(listener(DaemonAddress(socket_path=plan.layout.control_socket)))
    daemons.add(
        CONTROL_KEY,
        control_app(fleet, access),
        control,
        http=PeerCredentialsProtocol,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )


def _add_exporters(plan: HostPlan, stack: contextlib.ExitStack, exporters: ServerGroup, fleet: Fleet) -> list[int]:
    """Every node's exporter on its TCP port; the ports, by node."""
    ports = []
    for node in plan.nodes:
        sock = _exporter_socket(node, plan.exporter_port_base + node.index if plan.exporter_port_base else 0)
        stack.callback(sock.close)
        port = int(sock.getsockname()[1])
        ports.append(port)
        fleet.nodes[node.index].port = port
        app = _exporter_app(node, port, plan.exporter_interval)
        exporters.add(node.index, app, sock, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
    return ports


async def _serve(daemons: ServerGroup, exporters: ServerGroup, stop: _StopRequest, ready: Callable[[], None]) -> None:
    stopping = asyncio.Event()
    stop.attach(asyncio.get_running_loop(), stopping)
    await daemons.start()
    thread = _ExporterThread(exporters)
    thread.start()
    try:
        await asyncio.to_thread(thread.started.wait)
        thread.raise_failure()
        ready()
        await stopping.wait()
    finally:
        exporters.stop()  # first: they unregister from the daemons, which still answer
        await asyncio.to_thread(thread.join)
        daemons.stop()
        await daemons.wait()
    thread.raise_failure()


class _ExporterThread(threading.Thread):
    """Runs the exporters' event loop; ``started`` is set once they listen, or once they failed."""

    def __init__(self, exporters: ServerGroup) -> None:
        super().__init__(name="cluster-exporters", daemon=True)
        self.exporters = exporters
        self.started = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # handed to the main thread
            self.failure = exc
        finally:
            self.started.set()

    async def _serve(self) -> None:
        await self.exporters.start()
        self.started.set()
        await self.exporters.wait()

    def raise_failure(self) -> None:
        if self.failure is not None:
            raise StartError(f"the exporters stopped: {self.failure!r}")


def _remove_node_dir(layout: Layout) -> None:
    """The socket directory, once empty (the listeners removed their sockets and locks)."""
    with contextlib.suppress(OSError):
        os.rmdir(layout.node_dir)
