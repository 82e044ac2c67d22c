"""Run the daemon: own the listening socket's whole life, serve the app under uvicorn.

One daemon per address. A Unix socket is guarded by an ``flock`` on ``<socket>.lock`` (two
``up`` at once cannot both win); a socket file left by a crashed daemon (nothing answers on it)
is detected and replaced; SIGTERM and SIGINT stop the server cleanly and remove the socket.
Access (docs/security.md): the socket is mode 0600 (0660 with a group) in a directory only its
owner can write; on TCP a bearer token is written to the runtime directory and removed at exit.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import signal
import socket
import stat
import sys
from collections.abc import Callable, Iterator

import uvicorn

from emulator.daemon.app import DaemonInfo, create_app
from emulator.daemon.registry import Registry
from emulator.daemon.security import (
    Access,
    PeerCredentialsProtocol,
    SecurityError,
    bind_unix_socket,
    ensure_runtime_dir,
    open_directory_to_group,
    token_file,
)
from neurontools.sources.address import DaemonAddress, private_runtime_dir, token_path
from neurontools.sources.daemon_client import DaemonClient, DaemonError, DaemonUnavailable


class StartError(RuntimeError):
    """The daemon cannot start at this address; the message says why in one line."""


def probe(address: DaemonAddress, timeout: float = 2.0) -> dict[str, object] | None:
    """The status of a daemon answering at ``address``, or None if nothing answers."""
    try:
        status = DaemonClient(address, timeout=timeout).get("/status")
    except (DaemonUnavailable, DaemonError):
        return None
    return status if isinstance(status, dict) else None


def already_running_error(address: DaemonAddress, status: dict[str, object]) -> StartError:
    return StartError(
        f"a neuron-emulator daemon is already running at {address} "
        f"(pid {status.get('daemon_pid')}, {status.get('instance_type')}); stop it with 'neuron-emulator down'"
    )


@contextlib.contextmanager
def exclusive_lock(path: str, busy: Callable[[], StartError]) -> Iterator[None]:
    """Holds the lock file ``path`` (created 0600, never through a link) for the block, removing
    it after; taken by another process, the error ``busy()`` makes is raised."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise StartError(f"cannot create lock file {path}: {exc.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise busy() from None
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _unix_listener(path: str, group: int | None) -> Iterator[tuple[socket.socket, Access]]:
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent) and os.path.abspath(parent) != private_runtime_dir():
        raise StartError(f"cannot create socket {path}: directory {parent} does not exist")
    try:
        ensure_runtime_dir(parent)  # only its owner can write it; the per-user one is created 0700
        if group is not None:
            open_directory_to_group(parent, group)
    except SecurityError as exc:
        raise StartError(str(exc)) from None

    def busy() -> StartError:
        status = probe(DaemonAddress(socket_path=path))
        if status:
            return already_running_error(DaemonAddress(socket_path=path), status)
        return StartError(f"another neuron-emulator daemon is starting at {path}")

    with exclusive_lock(path + ".lock", busy):
        if os.path.lexists(path):
            mode = os.lstat(path).st_mode
            if not stat.S_ISSOCK(mode):
                raise StartError(f"{path} exists and is not a socket; remove it or choose another --socket")
            status = probe(DaemonAddress(socket_path=path))
            if status:
                raise already_running_error(DaemonAddress(socket_path=path), status)
            os.unlink(path)  # stale socket from a daemon that died without cleaning up
            print(f"neuron-emulator: replaced stale socket {path}", file=sys.stderr)

        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            bind_unix_socket(sock, path, group)  # 0600 / 0660 from the start
        except OSError as exc:
            sock.close()
            raise StartError(f"cannot listen on {path}: {exc.strerror}") from None
        except SecurityError as exc:
            sock.close()
            raise StartError(str(exc)) from None
        inode = os.stat(path).st_ino
        try:
            yield sock, Access()
        finally:
            sock.close()
            with contextlib.suppress(FileNotFoundError):
                if os.stat(path).st_ino == inode:  # only remove the socket we created
                    os.unlink(path)


@contextlib.contextmanager
def _tcp_listener(address: DaemonAddress, bind: str) -> Iterator[tuple[socket.socket, Access]]:
    assert address.port is not None
    status = probe(address, timeout=1.0)
    if status:
        raise already_running_error(address, status)
    sock = socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET, socket.SOCK_STREAM)
    with contextlib.ExitStack() as stack:
        stack.callback(sock.close)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((bind, address.port))
        except OSError as exc:
            raise StartError(f"cannot listen on {bind}:{address.port}: {exc.strerror}") from None
        path = token_path(address.port)
        try:
            token = stack.enter_context(token_file(path))  # the port is ours: no live daemon uses it
        except SecurityError as exc:
            raise StartError(str(exc)) from None
        yield sock, Access(token=token, token_path=path)


def listener(
    address: DaemonAddress, *, bind: str | None = None, socket_group: int | None = None
) -> contextlib.AbstractContextManager[tuple[socket.socket, Access]]:
    """The listening socket for ``address`` and the access rules that go with it. ``bind``: the
    TCP address to listen on when it is not the client address's host (e.g. 0.0.0.0)."""
    if address.socket_path is not None:
        return _unix_listener(address.socket_path, socket_group)
    assert address.host is not None and address.port is not None
    return _tcp_listener(address, bind or address.host)


def serve(
    address: DaemonAddress,
    registry: Registry,
    *,
    bind: str | None = None,
    socket_group: int | None = None,
    log_level: str = "warning",
) -> None:
    """Serve until SIGTERM/SIGINT. Raises :class:`StartError` if the address is taken or unsafe."""
    with listener(address, bind=bind, socket_group=socket_group) as (sock, access):
        app = create_app(registry, DaemonInfo(address=str(address)), access=access)
        config = uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="on", http=PeerCredentialsProtocol)
        server = uvicorn.Server(config)
        inv = registry.snapshot()
        listening = f"listening on {bind}:{address.port}, " if bind else ""
        token = f", bearer token in {access.token_path}" if access.token is not None else ""
        print(
            f"neuron-emulator: {inv.instance.instance_type} {inv.instance.instance_id} "
            f"serving on {address} ({listening}pid {os.getpid()}{token})",
            file=sys.stderr,
            flush=True,
        )
        if bind and not ipaddress.ip_address(bind).is_loopback:
            print(
                f"neuron-emulator: note: reads are open to every host that reaches {bind}:{address.port}; "
                "changes need the bearer token",
                file=sys.stderr,
                flush=True,
            )
        # uvicorn stops on SIGTERM/SIGINT, then re-raises the signal under the handler that was
        # installed before it ran: make that handler unwind normally so the socket is removed.
        previous = signal.signal(signal.SIGTERM, _exit_quietly)
        try:
            server.run(sockets=[sock])
        except (KeyboardInterrupt, _Stop):
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
        print(f"neuron-emulator: stopped, {address} removed", file=sys.stderr, flush=True)


class _Stop(Exception):
    pass


def _exit_quietly(signum: int, frame: object) -> None:
    raise _Stop
