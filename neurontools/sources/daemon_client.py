"""A small JSON-over-HTTP client for the emulator daemon, on a Unix socket or loopback TCP.

Standard library only (``http.client``), so every tool starts fast and stays torch-free. Each call
opens its own connection: callers are short CLI commands or background workers, and a fresh
connection per request keeps the client safe to use from several threads.

On TCP the daemon wants ``Authorization: Bearer <token>`` on every request that changes something
(docs/security.md): the client sends ``NEURON_EMULATOR_TOKEN`` if set, else the token the daemon
wrote to its token file when the address is this host's. The file is read at each such request, so
a restarted daemon's new token is picked up.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from typing import Any, Protocol

from neurontools.contract.reader import DaemonReader
from neurontools.sources.address import (
    ENV_VAR,
    TOKEN_ENV_VAR,
    DaemonAddress,
    is_local_host,
    resolve_address,
    token_path,
)

API_PREFIX = "/v1"
DEFAULT_TIMEOUT = 10.0
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class DaemonUnavailable(ConnectionError):
    """Nothing answers at the daemon address."""

    def __init__(self, address: DaemonAddress, reason: str) -> None:
        self.address = address
        self.reason = reason
        super().__init__(
            f"no Neuron emulator daemon at {address} ({reason}); start one with "
            f"'neuron-emulator up --detach', or point {ENV_VAR} at a running one"
        )


class DaemonError(RuntimeError):
    """The daemon answered with an error status; ``body`` is its JSON error object."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.body = body
        super().__init__(str(body.get("error") or body.get("detail") or f"HTTP {status}"))


def _header_safe(token: str) -> bool:
    return token.isascii() and token.isprintable() and " " not in token


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class DaemonApi(DaemonReader, Protocol):
    """What registering with the daemon needs from a client (``DaemonClient`` or a fake in tests)."""

    def post(self, path: str, body: Any) -> Any: ...

    def delete(self, path: str) -> Any: ...


class DaemonClient:
    def __init__(self, address: DaemonAddress | None = None, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.address = address if address is not None else resolve_address()
        self.timeout = timeout
        self._local: bool | None = None  # is the TCP host this machine (may its token file be sent)?

    def token(self) -> str | None:
        """The bearer token for a TCP daemon: ``NEURON_EMULATOR_TOKEN``, else the daemon's token file
        when the host is this machine (never sent elsewhere); None on a Unix socket."""
        if self.address.socket_path is not None or self.address.port is None:
            return None
        env = os.environ.get(TOKEN_ENV_VAR, "").strip()
        if env:
            if not _header_safe(env):  # http.client would refuse it with a traceback
                raise DaemonError(401, {"error": f"{TOKEN_ENV_VAR} is not a token (printable ASCII, no spaces)"})
            return env
        if self._local is None:
            self._local = is_local_host(self.address.host or "")
        if not self._local:
            return None
        try:
            with open(token_path(self.address.port), encoding="ascii") as fh:
                token = fh.read().strip()
        except (OSError, UnicodeDecodeError):
            return None  # no daemon wrote one: the daemon answers 401 and says where it keeps it
        return token if token and _header_safe(token) else None

    def _connection(self) -> http.client.HTTPConnection:
        if self.address.socket_path is not None:
            return _UnixHTTPConnection(self.address.socket_path, self.timeout)
        return http.client.HTTPConnection(self.address.host or "127.0.0.1", self.address.port, timeout=self.timeout)

    def request(self, method: str, path: str, body: Any = None, *, versioned: bool = True) -> Any:
        """Send one request to ``/v1{path}`` (``path`` as is if not ``versioned``); return the JSON answer."""
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        if method.upper() not in READ_METHODS:
            token = self.token()
            if token:
                headers["Authorization"] = f"Bearer {token}"
        conn = self._connection()
        try:
            try:
                conn.request(method, (API_PREFIX if versioned else "") + path, body=payload, headers=headers)
                response = conn.getresponse()
                raw = response.read()
            except FileNotFoundError:
                raise DaemonUnavailable(self.address, "socket does not exist") from None
            except ConnectionRefusedError:
                raise DaemonUnavailable(self.address, "connection refused") from None
            except TimeoutError:
                raise DaemonUnavailable(self.address, f"no answer within {self.timeout:g} s") from None
            except (OSError, http.client.HTTPException) as exc:
                raise DaemonUnavailable(self.address, str(exc) or type(exc).__name__) from None
        finally:
            conn.close()
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            data = {"error": raw.decode(errors="replace")[:200]}
        if response.status >= 400:
            raise DaemonError(response.status, data if isinstance(data, dict) else {"error": str(data)})
        return data

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)
