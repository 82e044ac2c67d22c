"""``neuron-exporter``: Prometheus metrics and a REST API for a Neuron host, read from the daemon.

    neuron-exporter [--bind ADDR] [-p/--port PORT] [--interval SECONDS] [--per-process]

* One FastAPI app under uvicorn. A background thread reads a daemon snapshot every ``--interval``
  seconds (default 1); ``/metrics``, ``/api/v1/*`` and ``/readyz`` only read the latest collected
  state, so a slow or stopped daemon never blocks a scrape.
* ``/metrics``: the official script's compatible families (when ``neurontools.exporter.compat``
  is installed) plus the extended families of ``fields.py``, Prometheus text format 0.0.4, and
  the ``process_*``/``python_*`` families of prometheus_client's default collectors.
* ``/healthz``: 200 while the process runs. ``/readyz``: 200 once a collection succeeded and the
  last one did, else 503 with ``{"error": ...}``.
* Listens on 127.0.0.1:8000 by default (``--bind 0.0.0.0`` to expose; port 0 picks a free port);
  the address actually bound is printed as one line on stderr.
* The daemon address comes from ``NEURON_EMULATOR_ADDR`` (README §The emulated instance). While it runs the
  exporter is registered with the daemon as a tool, so ``neuron-ls -a`` lists it.
* Bad flags: one line on stderr, exit 1. SIGINT / SIGTERM: clean shutdown, exit 0.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import math
import signal
import socket
import sys
import threading
from collections.abc import AsyncIterator, Generator, Sequence
from dataclasses import dataclass
from typing import NoReturn

import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import generate_latest

from neurontools import __version__
from neurontools.exporter.collector import (
    DEFAULT_INTERVAL,
    MAX_INTERVAL,
    MIN_INTERVAL,
    CollectedState,
    Collector,
    CompatFeed,
)
from neurontools.exporter.extended import ExtendedCollector
from neurontools.exporter.rest import build_router, error_response, install_error_handlers
from neurontools.http_limits import RequestLimits
from neurontools.messages import one_line
from neurontools.sources.address import AddressError
from neurontools.sources.daemon_client import DaemonClient
from neurontools.sources.tool_session import ToolSession

PROG = "neuron-exporter"
DEFAULT_BIND = "127.0.0.1"
DEFAULT_PORT = 8000  # where the official script serves and the dashboards' scrape config expects it
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"  # what generate_latest writes
SESSION_TIMEOUT = 1.0  # registering / unregistering with the daemon never holds shutdown longer

USAGE = f"""\
Usage:
  {PROG} [OPTIONS]

Serves Prometheus metrics (/metrics) and a REST API (/api/v1/, OpenAPI at /openapi.json) for the
Neuron devices of this host, read from the Neuron emulator daemon in the background.

Options:
      --bind ADDR         address to listen on (default: {DEFAULT_BIND}; 0.0.0.0 or :: to expose)
  -p, --port PORT         TCP port, 0 for any free one (default: {DEFAULT_PORT})
      --interval SECONDS  collection interval, {MIN_INTERVAL:g}-{MAX_INTERVAL:g} (default: {DEFAULT_INTERVAL:g})
      --per-process       also export per-process series (labels pid, runtime_tag)
      --version           print the version and exit
  -h, --help              show this help and exit

Environment:
  NEURON_EMULATOR_ADDR    emulator daemon address (socket path or http://127.0.0.1:PORT)
"""


class UsageError(Exception):
    pass


class _Terminated(Exception):
    """SIGTERM arrived before the server took over signal handling."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated


@dataclass(frozen=True)
class Options:
    bind: str = DEFAULT_BIND
    port: int = DEFAULT_PORT
    interval: float = DEFAULT_INTERVAL
    per_process: bool = False
    help: bool = False
    version: bool = False


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r} (expected an integer 0-65535)") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is out of range (expected 0-65535)")
    return value


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid interval {text!r} (expected seconds, e.g. 1 or 0.5)") from None
    if not math.isfinite(value) or not MIN_INTERVAL <= value <= MAX_INTERVAL:
        raise argparse.ArgumentTypeError(
            f"interval {text} is out of range (expected {MIN_INTERVAL:g} to {MAX_INTERVAL:g} seconds)"
        )
    return value


def _bind(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text.strip("[]")))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid address {text!r} (expected an IP address, e.g. 0.0.0.0)") from None


def parse_args(argv: Sequence[str]) -> Options:
    parser = _Parser(prog=PROG, add_help=False, allow_abbrev=False)
    parser.add_argument("--bind", type=_bind, default=DEFAULT_BIND)
    parser.add_argument("-p", "--port", type=_port, default=DEFAULT_PORT)
    parser.add_argument("--interval", type=_interval, default=DEFAULT_INTERVAL)
    parser.add_argument("--per-process", action="store_true")
    parser.add_argument("--version", action="store_true")
    parser.add_argument("-h", "--help", action="store_true")
    ns = parser.parse_args(list(argv))
    return Options(ns.bind, ns.port, ns.interval, ns.per_process, ns.help, ns.version)


# -- the app --------------------------------------------------------------------------------------


class Exposition:
    """The Neuron families are rendered once per collection, on the collection thread; a scrape
    sends those bytes plus prometheus_client's small process/platform/GC families."""

    def __init__(self, collector: Collector, *, per_process: bool) -> None:
        self.defaults = CollectorRegistry()
        for default in (ProcessCollector, PlatformCollector, GCCollector):
            default(registry=self.defaults)
        self.neuron = CollectorRegistry()
        if collector.compat.enabled:
            self.neuron.register(collector.compat)  # type: ignore[arg-type]
        self.neuron.register(ExtendedCollector(lambda: collector.state, per_process=per_process))  # type: ignore[arg-type]
        self._rendered = generate_latest(self.neuron)
        collector.on_collected = self.render

    def render(self) -> None:
        self._rendered = generate_latest(self.neuron)

    def scrape(self) -> bytes:
        return generate_latest(self.defaults) + self._rendered


def create_app(collector: Collector, exposition: Exposition, *, session: ToolSession | None = None) -> FastAPI:
    """The exporter's app; its lifespan runs ``collector`` and closes ``session`` at shutdown."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        collector.start()
        try:
            yield
        finally:
            collector.stop(timeout=1.0)
            if session is not None:
                session.close()

    app = FastAPI(
        title=PROG,
        version=__version__,
        description="Prometheus metrics and REST API for the Neuron devices of one host (read from the daemon).",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    app.add_middleware(RequestLimits)  # 413/414 for oversized bodies and targets (docs/fuzzing.md)

    def state() -> CollectedState:
        return collector.state

    @app.get("/metrics", response_class=Response, tags=["metrics"])
    def metrics() -> Response:
        """Prometheus text exposition of the latest collected state."""
        return Response(exposition.scrape(), media_type=TEXT_FORMAT)

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """The exporter process is alive."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], responses={503: {"description": "not ready"}})
    def readyz() -> JSONResponse:
        """200 when the last collection from the daemon succeeded, 503 before the first one or while it fails."""
        current = state()
        if current.ready:
            return JSONResponse({"status": "ready", "last_collection_timestamp_seconds": current.last_success})
        return error_response(503, f"not ready: {current.error}")

    app.include_router(build_router(state, collector.history, collector.history_step))
    return app


# -- serving --------------------------------------------------------------------------------------


class _Server(uvicorn.Server):
    """uvicorn's server without re-raising the caught SIGINT/SIGTERM after shutdown (exit 0)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def listen(bind: str, port: int) -> socket.socket:
    """A listening TCP socket on ``bind:port``; OSError says why it cannot be had."""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((bind, port))
        sock.listen(128)
        sock.set_inheritable(True)
    except OSError:
        sock.close()
        raise
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _error(message: str) -> int:
    print(f"{PROG}: error: {one_line(message)}", file=sys.stderr, flush=True)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return _main(argv)
    except (KeyboardInterrupt, _Terminated):
        return 0


def _main(argv: list[str]) -> int:
    try:
        opts = parse_args(argv)
    except UsageError as exc:
        return _error(f"{exc} (see {PROG} --help)")
    if opts.help:
        sys.stdout.write(USAGE)
        return 0
    if opts.version:
        print(f"{PROG} {__version__}")
        return 0
    try:
        client = DaemonClient(timeout=min(max(2 * opts.interval, 1.0), 5.0))
    except AddressError as exc:
        return _error(str(exc))
    try:
        sock = listen(opts.bind, opts.port)
    except OSError as exc:
        return _error(f"cannot listen on {opts.bind}:{opts.port}: {exc.strerror or exc}")

    session = ToolSession(DaemonClient(client.address, timeout=SESSION_TIMEOUT), " ".join([PROG, *argv]))
    collector = Collector(client, opts.interval, compat=CompatFeed.load(), session=session)
    app = create_app(collector, Exposition(collector, per_process=opts.per_process), session=session)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=2)
    server = _Server(config)
    print(f"{PROG}: serving {_url(sock)}/metrics (daemon {client.address})", file=sys.stderr, flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
