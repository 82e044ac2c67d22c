"""The cluster host's running nodes: serve them, take one down, bring it back (docs/cluster.md, docs/faults.md).

A node goes down the way a lost instance does: every runtime process attached to it is killed
(SIGKILL: the processes registered with its daemon, real local PIDs, checked by start time so
that a recycled PID is never hit), its neuron-exporter stops (its port refuses connections; its
Prometheus target stays, so ``up == 0``), its daemon stops answering and its socket is removed.
The other nodes are not touched. A node that comes back is a rebooted instance: the same identity,
daemon address and exporter port, a new daemon (no process, counters from zero, as after
``neuron-emulator down``/``up``, docs/lifecycle.md) and a new exporter.

The host is told over its **control socket** (``Layout.control_socket``, 0600 in the cluster's
0700 directory): ``POST /v1/nodes/{index}/down`` and ``.../up``, only from the host's owner or root
(peer credentials, the daemon's rules: docs/security.md); ``GET /v1/nodes`` for everyone.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import socket
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from emulator.cluster.layout import Layout
from emulator.cluster.nodes import NodeSpec
from emulator.cluster.servers import ServerFailed, ServerGroup
from emulator.cluster.state import ClusterState, write_json
from emulator.daemon.app import DaemonInfo, create_app
from emulator.daemon.registry import Registry
from emulator.daemon.security import Access, PeerCredentialsProtocol, SecurityError, bind_unix_socket
from emulator.hardware.inventory import build_inventory
from neurontools.contract.inventory import RUNTIME

PROG = "neuron-emulator"
GRACEFUL_SHUTDOWN_S = 2.0
CONTROL_KEY = "control"  # the control server's key in the daemons' group (nodes: their index)

ExporterFactory = Callable[[NodeSpec, int], Any]  # (node, port) -> the exporter's app
ExporterSocket = Callable[[NodeSpec, int], socket.socket]  # (node, port) -> a listening socket


class NodeError(Exception):
    """A node operation the host refuses; ``status``: the HTTP status of the control API."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class _Node:
    spec: NodeSpec
    port: int  # its exporter's
    registry: Registry
    down: bool = False


def _say(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def daemon_app(node: NodeSpec, registry: Registry, access: Access) -> FastAPI:
    return create_app(registry, DaemonInfo(address=str(node.address)), access=access)


def new_registry(node: NodeSpec) -> Registry:
    return Registry(build_inventory(node.identity.instance_type, node.identity))


@dataclass(eq=False)
class Fleet:
    """Every node of the running host: its daemon (in ``daemons``), its exporter (in ``exporters``,
    served in another thread's loop) and whether it is down. :meth:`node_down` and
    :meth:`node_up` run in the daemons' loop (the main thread's), one at a time."""

    layout: Layout
    daemons: ServerGroup
    exporters: ServerGroup
    exporter_app: ExporterFactory
    exporter_socket: ExporterSocket
    nodes: dict[int, _Node] = field(default_factory=dict, init=False)
    # set once every node listens (the state file is written)
    state: ClusterState | None = field(default=None, init=False)
    _lock: asyncio.Lock | None = field(default=None, init=False)
    # node -> inode of a socket bound by node_up (removed at exit)
    _bound: dict[int, int] = field(default_factory=dict, init=False)

    def add(self, node: NodeSpec, port: int, registry: Registry) -> None:
        self.nodes[node.index] = _Node(node, port, registry)

    def publish(self, state: ClusterState) -> None:
        """The state as written to the state file; later changes rewrite it."""
        self.state = state
        write_json(self.layout.state_file, state.to_dict())

    def _node(self, index: int) -> _Node:
        if index not in self.nodes:
            raise NodeError(404, f"no node {index}: the cluster has nodes 0-{len(self.nodes) - 1}")
        return self.nodes[index]

    def _mark(self, index: int, down: bool) -> None:
        self.nodes[index].down = down
        if self.state is not None:
            nodes = tuple(dataclasses.replace(n, down=down) if n.index == index else n for n in self.state.nodes)
            self.publish(dataclasses.replace(self.state, nodes=nodes))

    def _guard(self) -> asyncio.Lock:
        if self.state is None:
            raise NodeError(409, "the cluster is still starting")
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    # -- down -------------------------------------------------------------------------------------

    async def node_down(self, index: int) -> dict[str, Any]:
        """Take node ``index`` down: kill its runtime processes, stop its exporter and its daemon,
        remove its socket. Answers what was killed."""
        node = self._node(index)
        async with self._guard():
            if node.down:
                raise NodeError(409, f"node {index} is down already")
            killed = _kill_runtime_processes(node.registry)  # the instance is lost: its processes with it
            self._mark(index, True)
            with contextlib.suppress(ServerFailed):
                await self.exporters.call(self.exporters.stop_one(index))
            await self.daemons.stop_one(index)
            _remove_socket(str(node.spec.address.socket_path))
            self._bound.pop(index, None)
            killed += _kill_runtime_processes(node.registry)  # any that attached while it stopped
            _say(
                f"node {index} down (neuron-emulator fault node-down): killed "
                + (", ".join(f"pid {p['pid']}" for p in killed) or "no process")
            )
            return {"index": index, "down": True, "killed": killed}

    # -- up ---------------------------------------------------------------------------------------

    async def node_up(self, index: int) -> dict[str, Any]:
        """Bring node ``index`` back: a new daemon at its address (no process, counters from zero)
        and a new exporter on its port."""
        node = self._node(index)
        async with self._guard():
            if not node.down:
                raise NodeError(409, f"node {index} is up")
            try:
                exporter_sock = self.exporter_socket(node.spec, node.port)
            except Exception as exc:  # StartError: the port is taken meanwhile
                raise NodeError(409, str(exc)) from None
            path = str(node.spec.address.socket_path)
            try:
                daemon_sock = _bind_node_socket(path)
            except NodeError:
                exporter_sock.close()
                raise
            self._bound[index] = os.stat(path).st_ino
            registry = new_registry(node.spec)
            try:
                app = daemon_app(node.spec, registry, Access())
                await self.daemons.start_one(
                    index, app, daemon_sock, http=PeerCredentialsProtocol, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S
                )
                exporter = self.exporter_app(node.spec, node.port)
                await self.exporters.call(
                    self.exporters.start_one(
                        index, exporter, exporter_sock, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S
                    )
                )
            except BaseException:
                exporter_sock.close()
                with contextlib.suppress(Exception):
                    await self.daemons.stop_one(index)
                daemon_sock.close()
                _remove_socket(path)
                self._bound.pop(index, None)
                raise
            node.registry = registry
            self._mark(index, False)
            _say(f"node {index} up again (neuron-emulator cluster node-up)")
            return {"index": index, "down": False, "killed": []}

    def close(self) -> None:
        """At the host's exit: remove the sockets :meth:`node_up` bound (the servers have stopped)."""
        for index, inode in self._bound.items():
            path = str(self.nodes[index].spec.address.socket_path)
            with contextlib.suppress(FileNotFoundError):
                if os.stat(path).st_ino == inode:
                    os.unlink(path)
        self._bound.clear()

    def summary(self) -> list[dict[str, Any]]:
        return [{"index": i, "down": n.down} for i, n in sorted(self.nodes.items())]


def _kill_runtime_processes(registry: Registry) -> list[dict[str, Any]]:
    """SIGKILL every runtime process attached to the node (not tools, never this host): only the
    process the registry knows, by PID and start time."""
    import psutil

    killed = []
    for proc in registry.processes():
        if proc.kind != RUNTIME or proc.pid == os.getpid():
            continue
        known = registry.start_time(proc.pid)
        try:
            target = psutil.Process(proc.pid)
            if known is None or target.create_time() != known:
                continue  # gone already, or a later process with a recycled PID
            target.send_signal(signal.SIGKILL)
        except psutil.Error:
            continue
        killed.append({"pid": proc.pid, "command": proc.command, "neuroncores": list(proc.neuroncores)})
    return killed


def _remove_socket(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)


def _bind_node_socket(path: str) -> socket.socket:
    """A node's daemon socket again (its lock is still the host's), 0600 as at the start."""
    if os.path.lexists(path):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise NodeError(409, f"{path} exists and is not a socket")
        os.unlink(path)  # nothing serves it: the node is down and its directory is the host's
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        bind_unix_socket(sock, path, None)
    except (OSError, SecurityError) as exc:
        sock.close()
        raise NodeError(409, f"cannot listen on {path}: {getattr(exc, 'strerror', None) or exc}") from None
    return sock


# -- the control API ------------------------------------------------------------------------------


def control_app(fleet: Fleet, access: Access) -> FastAPI:
    """The host's control API on its control socket."""
    app = FastAPI(title="neuron-emulator cluster host", description="Take a cluster's nodes down and up.")

    @app.exception_handler(NodeError)
    async def node_error(_: Request, exc: NodeError) -> JSONResponse:
        return JSONResponse(status_code=exc.status, content={"error": exc.message})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = "not found" if exc.status_code == 404 else str(exc.detail)
        return JSONResponse(status_code=exc.status_code, content={"error": message})

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"error": "invalid request: expected a node index"})

    @app.get("/v1/nodes")
    async def nodes() -> list[dict[str, Any]]:
        return fleet.summary()

    @app.post("/v1/nodes/{index}/down")
    async def node_down(index: int, request: Request) -> dict[str, Any]:
        """Kill the node's runtime processes, stop its exporter and daemon (``fault node-down``)."""
        access.require_operator(request, "take nodes down")
        return await fleet.node_down(index)

    @app.post("/v1/nodes/{index}/up")
    async def node_up(index: int, request: Request) -> dict[str, Any]:
        """A new daemon and exporter for a node that is down (``cluster node-up``)."""
        access.require_operator(request, "bring nodes up")
        return await fleet.node_up(index)

    return app
