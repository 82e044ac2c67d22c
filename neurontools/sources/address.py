"""Where the emulator daemon listens: the ``NEURON_EMULATOR_ADDR`` contract of DESIGN.md.

The address is either a Unix socket path or ``http://127.0.0.1:PORT``. Without the variable the
default socket is ``$XDG_RUNTIME_DIR/neuron-emulator.sock``, else ``/tmp/neuron-emulator-<uid>.sock``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

ENV_VAR = "NEURON_EMULATOR_ADDR"


class AddressError(ValueError):
    """``NEURON_EMULATOR_ADDR`` (or a flag) holds something that is not a daemon address."""


@dataclass(frozen=True)
class DaemonAddress:
    """A Unix socket path (``socket_path``) or a loopback TCP endpoint (``host``/``port``)."""

    socket_path: str | None = None
    host: str | None = None
    port: int | None = None

    @property
    def is_unix(self) -> bool:
        return self.socket_path is not None

    def __str__(self) -> str:
        if self.socket_path is not None:
            return self.socket_path
        return f"http://{self.host}:{self.port}"


def default_socket_path() -> str:
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir and os.path.isdir(runtime_dir):
        return os.path.join(runtime_dir, "neuron-emulator.sock")
    return f"/tmp/neuron-emulator-{os.getuid()}.sock"


def parse_address(text: str) -> DaemonAddress:
    """Parse ``/path/to.sock``, ``unix:/path``, ``http://HOST:PORT`` (HOST must be loopback-ish)."""
    text = text.strip()
    if not text:
        raise AddressError("empty daemon address")
    if text.startswith("unix:"):
        text = text[len("unix:") :].removeprefix("//")
    if text.startswith(("http://", "https://")):
        if text.startswith("https://"):
            raise AddressError(f"daemon address {text!r}: only http:// is served (loopback, no TLS)")
        parts = urlsplit(text)
        try:
            port = parts.port
        except ValueError:
            port = None
        if not parts.hostname or port is None or port == 0:
            raise AddressError(f"daemon address {text!r}: expected http://HOST:PORT with a port 1-65535")
        if parts.path not in ("", "/"):
            raise AddressError(f"daemon address {text!r}: no path allowed after the port")
        return DaemonAddress(host=parts.hostname, port=port)
    if "://" in text:
        raise AddressError(f"daemon address {text!r}: expected a socket path or http://HOST:PORT")
    return DaemonAddress(socket_path=os.path.abspath(text))


def resolve_address(explicit: str | None = None) -> DaemonAddress:
    """The address to use: an explicit flag value, else ``NEURON_EMULATOR_ADDR``, else the default."""
    if explicit:
        return parse_address(explicit)
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        try:
            return parse_address(env)
        except AddressError as exc:
            raise AddressError(f"{ENV_VAR}: {exc}") from None
    return DaemonAddress(socket_path=default_socket_path())
