"""Where the emulator daemon listens: ``NEURON_EMULATOR_ADDR`` (README §The emulated instance, docs/security.md).

The address is either a Unix socket path or ``http://HOST:PORT`` (``http://127.0.0.1:PORT`` on one
host). Without the variable the default socket is ``$XDG_RUNTIME_DIR/neuron-emulator.sock``, else
``/tmp/neuron-emulator-<uid>/daemon.sock`` (a directory only its owner can write; under ``$TMPDIR``
when that is set). A daemon on TCP writes its bearer token to
``<runtime dir>/neuron-emulator-<port>.token`` (docs/security.md).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

ENV_VAR = "NEURON_EMULATOR_ADDR"
TOKEN_ENV_VAR = "NEURON_EMULATOR_TOKEN"
XDG_SOCKET_NAME = "neuron-emulator.sock"
PRIVATE_SOCKET_NAME = "daemon.sock"


class AddressError(ValueError):
    """``NEURON_EMULATOR_ADDR`` (or a flag) holds something that is not a daemon address."""


@dataclass(frozen=True)
class DaemonAddress:
    """A Unix socket path (``socket_path``) or a TCP endpoint (``host``/``port``)."""

    socket_path: str | None = None
    host: str | None = None
    port: int | None = None

    @property
    def is_unix(self) -> bool:
        return self.socket_path is not None

    def __str__(self) -> str:
        if self.socket_path is not None:
            return self.socket_path
        host = f"[{self.host}]" if self.host and ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def private_runtime_dir() -> str:
    """``/tmp/neuron-emulator-<uid>``: the per-user directory used without ``$XDG_RUNTIME_DIR``
    (under ``$TMPDIR`` instead of /tmp when that is an absolute path)."""
    base = os.environ.get("TMPDIR", "")
    return os.path.abspath(os.path.join(base if os.path.isabs(base) else "/tmp", f"neuron-emulator-{os.getuid()}"))


def runtime_dir() -> str:
    """The per-user directory of the daemon's runtime files: ``$XDG_RUNTIME_DIR`` when it is an
    existing absolute directory, else :func:`private_runtime_dir` (the daemon creates it 0700)."""
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(xdg) and os.path.isdir(xdg):
        return xdg
    return private_runtime_dir()


def default_socket_path() -> str:
    directory = runtime_dir()
    name = PRIVATE_SOCKET_NAME if directory == private_runtime_dir() else XDG_SOCKET_NAME
    return os.path.join(directory, name)


def token_path(port: int) -> str:
    """Where a daemon serving TCP ``port`` keeps its bearer token (mode 0600, removed at exit)."""
    return os.path.join(runtime_dir(), f"neuron-emulator-{port}.token")


def is_local_host(host: str) -> bool:
    """True when ``host`` is this machine: ``localhost``, a loopback or unspecified address, or an
    IP address of one of its interfaces (it can be bound). Hostnames are not resolved."""
    if host.lower() == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if ip.is_loopback or ip.is_unspecified:
        return True
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((host, 0))
        except OSError:
            return False
    return True


def parse_address(text: str) -> DaemonAddress:
    """Parse ``/path/to.sock``, ``unix:/path`` or ``http://HOST:PORT`` (no TLS, no path)."""
    text = text.strip()
    if not text:
        raise AddressError("empty daemon address")
    if text.startswith("unix:"):
        text = text[len("unix:") :].removeprefix("//")
    if text.startswith(("http://", "https://")):
        if text.startswith("https://"):
            raise AddressError(f"daemon address {text!r}: only http:// is served (no TLS)")
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
