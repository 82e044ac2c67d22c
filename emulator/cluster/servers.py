"""Many uvicorn servers in one asyncio event loop, started and stopped together or one at a time.

uvicorn's ``Server`` is made to be a process's only server: it takes SIGINT/SIGTERM over and wakes
ten times a second to refresh its ``Date`` header and look at its exit flag. Here the cluster host
handles the signals, and one ticker per loop refreshes every server's header once a second; each
server otherwise sleeps until it or the group is stopped.

Servers have keys (the cluster host uses node indexes): :meth:`ServerGroup.stop_one` stops one
server (a node that went down, ``neuron-emulator fault node-down``), :meth:`ServerGroup.start_one`
starts a server under a key whose server has stopped (the node back up).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Coroutine, Generator, Hashable
from typing import Any, TypeVar

import uvicorn

TICK_S = 1.0  # the Date header's resolution
T = TypeVar("T")


class ServerFailed(RuntimeError):
    """A server of the group stopped before the group was stopped (e.g. its app failed to start)."""


class _GroupServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.stop_event: asyncio.Event | None = None  # created in the group's loop

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # the host process handles signals (emulator/cluster/host.py)

    async def main_loop(self) -> None:
        assert self.stop_event is not None
        await self.stop_event.wait()
        self.should_exit = True


class _Entry:
    def __init__(self, server: _GroupServer, sock: socket.socket) -> None:
        self.server = server
        self.sock = sock
        self.task: asyncio.Task[None] | None = None

    def launch(self) -> None:
        self.server.stop_event = asyncio.Event()
        self.task = asyncio.create_task(self.server.serve(sockets=[self.sock]))

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()


def _server(app: Any, **config: Any) -> _GroupServer:
    options: dict[str, Any] = {"log_level": "warning", "access_log": False, "lifespan": "on"}
    options.update(config)
    return _GroupServer(uvicorn.Config(app, **options))


class ServerGroup:
    """uvicorn servers (each app on its own listening socket) in the event loop that runs
    :meth:`start`; :meth:`stop` may be called from any thread, :meth:`call` runs a coroutine (e.g.
    :meth:`stop_one`) in the group's loop from another thread's loop."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._entries: dict[Hashable, _Entry] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ticker: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, key: Hashable, app: Any, sock: socket.socket, **config: Any) -> None:
        """Serve ``app`` on the listening socket ``sock`` (``config``: more ``uvicorn.Config``
        options) once the group starts."""
        if key in self._entries:
            raise ValueError(f"{self.name}: a server {key!r} exists already")
        self._entries[key] = _Entry(_server(app, **config), sock)

    def running(self, key: Hashable) -> bool:
        return key in self._entries and self._entries[key].running

    async def start(self) -> None:
        """Start every server in the running loop; return once all listen. Raises
        :class:`ServerFailed` when one ends first."""
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        entries = list(self._entries.values())
        for entry in entries:
            entry.launch()
        await self._until_started(entries)
        self._ticker = asyncio.create_task(self._tick())

    async def _until_started(self, entries: list[_Entry]) -> None:
        while not all(entry.server.started for entry in entries):
            for entry in entries:
                assert entry.task is not None
                if entry.task.done():
                    entry.task.result()  # its exception, if it has one
                    raise ServerFailed(f"{self.name}: a server stopped while starting")
            await asyncio.sleep(0.01)

    async def start_one(self, key: Hashable, app: Any, sock: socket.socket, **config: Any) -> None:
        """In the group's loop: serve ``app`` on ``sock`` under ``key``, whose earlier server (if
        any) has stopped; return once it listens. Raises :class:`ServerFailed` if it cannot."""
        if self._stopping is None or self._stopping.is_set():
            raise ServerFailed(f"{self.name}: the group is not running")
        if self.running(key):
            raise ServerFailed(f"{self.name}: server {key!r} is running")
        entry = _Entry(_server(app, **config), sock)
        self._entries[key] = entry
        entry.launch()
        await self._until_started([entry])

    async def stop_one(self, key: Hashable) -> None:
        """In the group's loop: stop the server ``key``; return once it has shut down (its listening
        socket closed, its app's lifespan ended)."""
        entry = self._entries[key]
        if entry.server.stop_event is not None:
            entry.server.stop_event.set()
        if entry.task is not None:
            with contextlib.suppress(Exception):  # a server that failed has stopped too
                await entry.task

    def call(self, coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        """Run ``coro`` in the group's loop; await the answer in the calling thread's loop."""
        if self._loop is None or self._loop.is_closed():
            coro.close()
            raise ServerFailed(f"{self.name}: not running")
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            for entry in list(self._entries.values()):
                if entry.running:
                    await entry.server.on_tick(0)  # counter 0: refresh the Date header

    def stop(self) -> None:
        """Ask every server to shut down (thread-safe; nothing happens before :meth:`start` or
        after its loop ended)."""
        if self._loop is not None and self._stopping is not None:
            with contextlib.suppress(RuntimeError):  # its loop has ended: nothing serves any more
                self._loop.call_soon_threadsafe(self._stop_all)

    def _stop_all(self) -> None:
        assert self._stopping is not None
        self._stopping.set()
        for entry in self._entries.values():
            if entry.server.stop_event is not None:
                entry.server.stop_event.set()

    async def wait(self) -> None:
        """Until the group is stopped and every server has shut down (its app's lifespan ended)."""
        assert self._stopping is not None
        try:
            await self._stopping.wait()
            await asyncio.gather(*(e.task for e in self._entries.values() if e.task is not None))
        finally:
            if self._ticker is not None:
                self._ticker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._ticker

    async def run(self) -> None:
        """:meth:`start`, then serve until :meth:`stop`."""
        await self.start()
        await self.wait()
