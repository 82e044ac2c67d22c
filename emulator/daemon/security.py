"""Who may change the daemon: the access model of docs/security.md.

* Unix socket: mode 0600 (0660 with ``--socket-group``) in a directory only its owner can write.
  Each connection carries the connecting process's credentials (``SO_PEERCRED``): a process may
  attach, report executions for and release only itself; the daemon's owner and root may also
  release any process (an operator cleaning up) and inject faults.
* TCP: every request that is not a read (GET/HEAD/OPTIONS) needs ``Authorization: Bearer <token>``;
  the token is generated at start and written mode 0600 to ``<runtime dir>/neuron-emulator-<port>.token``
  (removed at shutdown). A token holder has the owner's authority.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import hmac
import os
import secrets
import socket
import stat
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from neurontools.sources.address import TOKEN_ENV_VAR, private_runtime_dir
from neurontools.sources.daemon_client import READ_METHODS

PEER_EXTENSION = "neuron_emulator.peer_credentials"  # key in scope["extensions"]
SOCKET_MODE = 0o600
GROUP_SOCKET_MODE = 0o660
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class SecurityError(RuntimeError):
    """A path or group the daemon refuses to use; the message says why in one line."""


# -- files and directories ------------------------------------------------------------------------


def check_private_dir(path: str, *, follow_symlinks: bool = True) -> os.stat_result:
    """``path`` must be a directory that only its owner (this user, or root) can write."""
    try:
        st = os.stat(path) if follow_symlinks else os.lstat(path)
    except FileNotFoundError:
        raise SecurityError(f"directory {path} does not exist") from None
    except OSError as exc:
        raise SecurityError(f"cannot use directory {path}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise SecurityError(f"refusing to use {path}: not a directory")
    if st.st_uid not in (os.geteuid(), 0):
        raise SecurityError(f"refusing to use {path}: owned by uid {st.st_uid}, not by you (uid {os.geteuid()})")
    if st.st_mode & 0o022:
        raise SecurityError(
            f"refusing to use {path}: writable by other users (mode {stat.S_IMODE(st.st_mode):04o}); "
            "the daemon's directory must be writable by its owner only"
        )
    return st


def ensure_runtime_dir(path: str) -> None:
    """Check the directory of the daemon's socket or token file. The per-user fallback directory
    ``/tmp/neuron-emulator-<uid>`` is created 0700 when missing; an existing one must be a real
    directory (not a symlink) owned by this user and not group/world-writable."""
    if os.path.abspath(path) != private_runtime_dir():
        check_private_dir(path)
        return
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise SecurityError(f"cannot create directory {path}: {exc.strerror}") from None
    if os.path.islink(path):
        raise SecurityError(f"refusing to use {path}: a symbolic link (anyone can place one in /tmp)")
    st = check_private_dir(path, follow_symlinks=False)
    if st.st_uid != os.geteuid():
        raise SecurityError(f"refusing to use {path}: owned by uid {st.st_uid}, not by you (uid {os.geteuid()})")


def resolve_group(name: str) -> int:
    """The gid of a group name (or a numeric gid); SecurityError when there is no such group."""
    if name.isdigit():
        return int(name)
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise SecurityError(f"--socket-group {name}: no such group") from None


def open_directory_to_group(path: str, gid: int) -> None:
    """Let members of ``gid`` reach a socket in ``path``. The per-user directory is made 0710 with
    that group (still writable by its owner only); any other directory must already allow it."""
    st = os.stat(path)
    mode = stat.S_IMODE(st.st_mode)
    if os.path.abspath(path) == private_runtime_dir() and st.st_uid == os.geteuid():
        try:
            os.chown(path, -1, gid)
            os.chmod(path, (mode | 0o010) & ~0o022)
        except OSError as exc:
            raise SecurityError(f"cannot give {path} to group {gid}: {exc.strerror}") from None
        return
    if not (mode & 0o001 or (mode & 0o010 and st.st_gid == gid)):
        raise SecurityError(
            f"--socket-group: members of group {gid} cannot reach {path} (mode {mode:04o}, group {st.st_gid}); "
            "use --socket in a directory they can search"
        )


def bind_unix_socket(sock: socket.socket, path: str, gid: int | None) -> None:
    """Bind ``sock`` at ``path`` as mode 0600 (0660 and group ``gid``), never wider for an instant:
    the umask covers the bind, the group is set before the group bits are."""
    previous = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(previous)
    try:
        if gid is not None:
            os.chown(path, -1, gid)
        os.chmod(path, SOCKET_MODE if gid is None else GROUP_SOCKET_MODE)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise SecurityError(f"cannot set the owner group or mode of {path}: {exc.strerror}") from None


@contextlib.contextmanager
def token_file(path: str) -> Iterator[str]:
    """Generate the TCP bearer token and keep it in ``path`` (mode 0600) while the block runs."""
    ensure_runtime_dir(os.path.dirname(path))
    token = secrets.token_urlsafe(32)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(2):
        try:
            fd = os.open(path, flags, 0o600)
            break
        except FileExistsError:
            # left by a daemon that died on this port (the port is ours now): replace it
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        except OSError as exc:
            raise SecurityError(f"cannot write token file {path}: {exc.strerror}") from None
    else:
        raise SecurityError(f"cannot write token file {path}: it keeps reappearing")
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (token + "\n").encode())
        inode = os.fstat(fd).st_ino
    finally:
        os.close(fd)
    try:
        yield token
    finally:
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == inode:  # only remove the file we wrote
                os.unlink(path)


# -- who is calling -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Peer:
    """Credentials of the process at the other end of a Unix socket connection."""

    pid: int
    uid: int
    gid: int


def peer_credentials(sock: Any) -> Peer | None:
    """``SO_PEERCRED`` of a connected Unix socket (the process that connected), else None."""
    if sock is None or getattr(sock, "family", None) != socket.AF_UNIX:
        return None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    except OSError:
        return None
    pid, uid, gid = _PEERCRED.unpack(raw)
    return Peer(pid, uid, gid)


class PeerCredentialsProtocol(H11Protocol):
    """uvicorn's h11 protocol that adds the connecting process's credentials to each request's
    scope, as ``scope["extensions"]["neuron_emulator.peer_credentials"]`` (None on TCP)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # base: BaseTransport
        super().connection_made(transport)
        peer = peer_credentials(transport.get_extra_info("socket"))
        app = self.app

        async def with_peer(scope: Scope, receive: Receive, send: Send) -> None:
            scope["extensions"] = {**(scope.get("extensions") or {}), PEER_EXTENSION: peer}
            await app(scope, receive, send)

        self.app = with_peer


@dataclass(frozen=True)
class Access:
    """The daemon's access rules. ``token`` is set on TCP (and only there); on a Unix socket the
    caller is known from its peer credentials, and a request without them changes nothing."""

    token: str | None = None
    token_path: str = ""
    owner_uid: int = field(default_factory=os.geteuid)

    def is_operator(self, peer: Peer) -> bool:
        return peer.uid in (self.owner_uid, 0)

    def _peer(self, request: Request) -> Peer:
        peer = (request.scope.get("extensions") or {}).get(PEER_EXTENSION)
        if not isinstance(peer, Peer):
            raise HTTPException(403, "cannot identify the calling process (no peer credentials on this connection)")
        return peer

    def require_self(self, request: Request, pid: int, action: str, *, operator: bool = False) -> None:
        """Only process ``pid`` itself may do ``action`` (and, with ``operator``, the daemon's
        owner or root). On TCP the bearer token, already checked, stands for the owner."""
        if self.token is not None:
            return
        peer = self._peer(request)
        if peer.pid == pid or (operator and self.is_operator(peer)):
            return
        who = "itself, the daemon's owner or root" if operator else "itself"
        raise HTTPException(403, f"process {peer.pid} may not {action} process {pid}: only {who} may")

    def require_operator(self, request: Request, action: str) -> None:
        """Only the daemon's owner or root (on TCP: a token holder) may do ``action``."""
        if self.token is not None:
            return
        peer = self._peer(request)
        if not self.is_operator(peer):
            raise HTTPException(403, f"uid {peer.uid} may not {action}: only the daemon's owner or root may")

    def bearer_error(self, headers: list[tuple[bytes, bytes]]) -> str | None:
        """Why a TCP request that changes something is refused, or None when its token is right."""
        assert self.token is not None
        value = next((v for k, v in headers if k == b"authorization"), None)
        where = f"the daemon's token is in {self.token_path}, or set {TOKEN_ENV_VAR}"
        if value is None:
            return (
                "missing bearer token: over TCP a request that changes the daemon needs "
                f"'Authorization: Bearer <token>' ({where})"
            )
        scheme, _, given = value.decode("latin-1").strip().partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
            return f"invalid bearer token ({where})"
        return None


class BearerTokenMiddleware:
    """On TCP, refuse every request that is not a read without the right bearer token: 401 with
    the API's JSON error body, before the request body is read or any route runs."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.access.token is not None and scope["method"] not in READ_METHODS:
            error = self.access.bearer_error(scope["headers"])
            if error is not None:
                response = JSONResponse(
                    status_code=401,
                    content={"error": error},
                    headers={"WWW-Authenticate": 'Bearer realm="neuron-emulator"'},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
