"""A small JSON-over-HTTP client for the emulator daemon, on a Unix socket or loopback TCP.

Standard library only (``http.client``), so every tool starts fast and stays torch-free. Each call
opens its own connection: callers are short CLI commands or background workers, and a fresh
connection per request keeps the client safe to use from several threads.
"""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any

from neurontools.sources.address import ENV_VAR, DaemonAddress, resolve_address

API_PREFIX = "/v1"
DEFAULT_TIMEOUT = 10.0


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


class DaemonClient:
    def __init__(self, address: DaemonAddress | None = None, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.address = address if address is not None else resolve_address()
        self.timeout = timeout

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
