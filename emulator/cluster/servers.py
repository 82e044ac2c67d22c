"""Many uvicorn servers in one asyncio event loop, started and stopped together.

uvicorn's ``Server`` is made to be a process's only server: it takes SIGINT/SIGTERM over and wakes
ten times a second to refresh its ``Date`` header and look at its exit flag. Here the cluster host
handles the signals, and one ticker per loop refreshes every server's header once a second; each
server otherwise sleeps until the group is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Generator
from typing import Any

import uvicorn

TICK_S = 1.0  # the Date header's resolution


class ServerFailed(RuntimeError):
    """A server of the group stopped before the group was stopped (e.g. its app failed to start)."""


class _GroupServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, group: ServerGroup) -> None:
        super().__init__(config)
        self.group = group

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # the host process handles signals (emulator/cluster/host.py)

    async def main_loop(self) -> None:
        await self.group.stopping().wait()
        self.should_exit = True


class ServerGroup:
    """uvicorn servers (each app on its own listening socket) in the event loop that runs
    :meth:`start`; :meth:`stop` may be called from any thread."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._entries: list[tuple[_GroupServer, socket.socket]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ticker: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, app: Any, sock: socket.socket, **config: Any) -> None:
        """Serve ``app`` on the listening socket ``sock`` (``config``: more ``uvicorn.Config`` options)."""
        options: dict[str, Any] = {"log_level": "warning", "access_log": False, "lifespan": "on"}
        options.update(config)
        self._entries.append((_GroupServer(uvicorn.Config(app, **options), self), sock))

    def stopping(self) -> asyncio.Event:
        if self._stopping is None:
            raise RuntimeError(f"{self.name}: not started")
        return self._stopping

    async def start(self) -> None:
        """Start every server in the running loop; return once all listen. Raises
        :class:`ServerFailed` when one ends first."""
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._tasks = [asyncio.create_task(server.serve(sockets=[sock])) for server, sock in self._entries]
        while not all(server.started for server, _ in self._entries):
            for task in self._tasks:
                if task.done():
                    task.result()  # its exception, if it has one
                    raise ServerFailed(f"{self.name}: a server stopped while starting")
            await asyncio.sleep(0.01)
        self._ticker = asyncio.create_task(self._tick())

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            for server, _ in self._entries:
                await server.on_tick(0)  # counter 0: refresh the Date header

    def stop(self) -> None:
        """Ask every server to shut down (thread-safe; nothing happens before :meth:`start`)."""
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)

    async def wait(self) -> None:
        """Until every server has shut down (its app's lifespan ended)."""
        try:
            await asyncio.gather(*self._tasks)
        finally:
            if self._ticker is not None:
                self._ticker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._ticker

    async def run(self) -> None:
        """:meth:`start`, then serve until :meth:`stop`."""
        await self.start()
        await self.wait()
