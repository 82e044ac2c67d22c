"""``neuron-monitor-prometheus``: drop-in for the official script (docs/reference/neuron-monitor-prometheus.md).

``neuron-monitor | neuron-monitor-prometheus [-p PORT] [--bind ADDR] [--key-file K --cert-file C]``

* Reads neuron-monitor reports (one JSON object per line) on stdin, ours or a real one, and serves
  the official script's metrics (``neurontools.exporter.compat``) plus prometheus_client's default
  ``python_gc_*``, ``python_info`` and ``process_*`` collectors, in the Prometheus text format on
  any path (``/``, ``/metrics``; OpenMetrics on request, ``?name[]=`` filtering).
* Listens on all IPv4 interfaces like the official script (``0.0.0.0``); ``--bind`` picks another
  address (``127.0.0.1``, ``::``). ``-p 0`` takes a free port; the startup line
  ``Running HTTP prometheus server at port <port>`` (``HTTPS`` with TLS) names the port in use.
* ``--key-file`` and ``--cert-file`` (both or neither) serve HTTPS; both files are checked once a
  second and reloaded when their contents change (``Refreshing TLS certificates``), as the
  official script does per input line, so renewed certificates apply without a restart.
* A line that is not a JSON object prints ``Unable to decode JSON <reason>`` on stdout and is
  skipped; blank lines are ignored; group and runtime errors go to stderr in the official wording.
* End of input (the producer exited): the last values stay served until SIGINT/SIGTERM, as with
  the official script (whose read loop keeps polling the closed stdin); one notice on stderr.
  SIGINT and SIGTERM exit 0 without a traceback.
* ``--enable-k8s-info`` (official 2.23+; what it adds there is not public): the per-core families
  carry ``pod``, ``namespace`` and ``container`` labels from the reports' ``neuron_k8s_info``
  (neuron-monitor with ``{"type": "k8s_info"}`` in ``system_metrics``; docs/kubernetes.md).
* Bad flags: one line on stderr, exit 2 (argparse's code, as the official script). The server
  cannot start (port in use, bad address, unreadable key/certificate): one line on stderr, exit 1.
"""

from __future__ import annotations

import hashlib
import json
import signal
import ssl
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, TextIO

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from neurontools.cli import (
    STOPPED,
    RaisingParser,
    UsageError,
    arguments,
    port_number,
    print_error,
    print_usage_error,
    show_help,
    stop_signals,
    write_line,
)
from neurontools.exporter.compat import CompatMetrics
from neurontools.sources.report_stream import MAX_LINE_BYTES, read_lines

PROG = "neuron-monitor-prometheus"
DEFAULT_PORT = 8000
DEFAULT_BIND = "0.0.0.0"  # prometheus_client.start_http_server's default, used by the official script
TLS_CHECK_SECONDS = 1.0


@dataclass
class Options:
    port: int = DEFAULT_PORT
    bind: str = DEFAULT_BIND
    key_file: str | None = None
    cert_file: str | None = None
    enable_k8s_info: bool = False
    help: bool = False

    @property
    def tls(self) -> bool:
        return self.key_file is not None


def _parser() -> RaisingParser:
    parser = RaisingParser(
        prog=PROG,
        add_help=False,
        description="Serve neuron-monitor reports read on stdin as Prometheus metrics "
        "(the metric names of the official neuron-monitor-prometheus.py).",
        epilog=f"example: neuron-monitor | {PROG} --port {DEFAULT_PORT}",
    )
    parser.add_argument("-h", "--help", action="store_true", help="show this help message and exit")
    parser.add_argument(
        "-p",
        "--port",
        type=port_number,
        default=DEFAULT_PORT,
        help="HTTP port on which to run the server (default: 8000)",
    )
    parser.add_argument(
        "--bind", default=DEFAULT_BIND, metavar="ADDR", help="address to listen on (default: 0.0.0.0, all interfaces)"
    )
    parser.add_argument("--key-file", help="Path to SSL private key file (only for HTTPS)")
    parser.add_argument("--cert-file", help="Path to SSL certificate file (only for HTTPS)")
    parser.add_argument(
        "--enable-k8s-info",
        action="store_true",
        help="label per-core metrics with pod, namespace and container from the reports' neuron_k8s_info",
    )
    return parser


def parse_args(argv: Sequence[str]) -> Options:
    """Raises :class:`UsageError` for a bad flag or value."""
    ns = _parser().parse_args(list(argv))
    if ns.help:
        return Options(help=True)
    if (ns.key_file is None) != (ns.cert_file is None):
        raise UsageError("--key-file and --cert-file must be given together")
    if ns.key_file == "" or ns.cert_file == "":
        raise UsageError("--key-file and --cert-file need a file name")
    if not ns.bind:
        raise UsageError("--bind needs an address")
    return Options(ns.port, ns.bind, ns.key_file, ns.cert_file, ns.enable_k8s_info)


def build_registry(metrics: CompatMetrics) -> CollectorRegistry:
    """A registry like prometheus_client's default one (same collectors, same order) plus ``metrics``."""
    registry = CollectorRegistry(auto_describe=True)
    GCCollector(registry=registry)
    PlatformCollector(registry=registry)
    ProcessCollector(registry=registry)
    registry.register(metrics)
    return registry


def _digest(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError as exc:
        return f"unreadable: {exc}"


@dataclass(eq=False)
class CertificateWatcher:
    """Reloads the server's certificate chain when the key or certificate file changes."""

    context: ssl.SSLContext
    cert_file: str
    key_file: str
    out: TextIO
    err: TextIO
    _seen: tuple[str, str] = field(init=False)
    _stop: threading.Event = field(init=False, default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._seen = self._digests()

    def _digests(self) -> tuple[str, str]:
        return _digest(self.cert_file), _digest(self.key_file)

    def check(self) -> bool:
        """Reload if either file changed since the last check; True when a reload happened."""
        current = self._digests()
        if current == self._seen:
            return False
        self._seen = current  # a broken pair is reported once, then retried on the next change
        try:
            _check_tls(self.cert_file, self.key_file)  # a half-replaced pair must not touch the live context
            self.context.load_cert_chain(certfile=self.cert_file, keyfile=self.key_file)
        except (OSError, ValueError) as exc:
            write_line(self.err, f"{PROG}: cannot reload the TLS certificate, keeping the previous one: {exc}")
            return False
        write_line(self.out, "Refreshing TLS certificates")
        return True

    def start(self) -> None:
        threading.Thread(target=self._run, name="tls-reload", daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(TLS_CHECK_SECONDS):
            self.check()

    def stop(self) -> None:
        self._stop.set()


def _check_tls(cert_file: str, key_file: str) -> None:
    """Load the pair once before binding, so a bad file gets its own clear message."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certfile=cert_file, keyfile=key_file)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array"}.get(type(value), "value")


def pump(lines: Iterable[bytes | None], metrics: CompatMetrics, out: TextIO | None, err: TextIO | None) -> int:
    """Feed every report line to ``metrics``; returns the number of reports applied. A None line
    is one that was too long to read (``read_lines``): skipped like any undecodable line."""
    applied = 0
    for raw in lines:
        if raw is None:
            write_line(out, f"Unable to decode JSON line longer than {MAX_LINE_BYTES} bytes")
            continue
        if not raw.strip():
            continue
        try:
            report = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            write_line(out, f"Unable to decode JSON {exc}")
            continue
        if not isinstance(report, dict):
            write_line(out, f"Unable to decode JSON expected a report object, got a JSON {_json_type(report)}")
            continue
        for message in metrics.update(report):
            write_line(err, message)
        applied += 1
    return applied


def _serve(opts: Options, registry: CollectorRegistry) -> Any:
    """Start the HTTP(S) server thread; returns the server (OSError/ssl.SSLError propagate)."""
    httpd, _thread = start_http_server(
        opts.port, addr=opts.bind, registry=registry, certfile=opts.cert_file, keyfile=opts.key_file
    )
    return httpd


def main(argv: Sequence[str] | None = None, *, stdin: IO[bytes] | None = None) -> int:
    argv = arguments(argv)
    try:
        opts = parse_args(argv)
    except UsageError as exc:
        return print_usage_error(PROG, str(exc), 2)  # argparse's exit status, as the official script
    if opts.help:
        return show_help(_parser().format_help().rstrip("\n"))

    if opts.tls:
        assert opts.cert_file is not None and opts.key_file is not None
        try:
            _check_tls(opts.cert_file, opts.key_file)
        except (OSError, ValueError) as exc:
            return print_error(
                PROG, f"cannot load the TLS certificate {opts.cert_file!r} and key {opts.key_file!r}: {exc}"
            )

    metrics = CompatMetrics(k8s_info=opts.enable_k8s_info)
    registry = build_registry(metrics)
    try:
        httpd = _serve(opts, registry)
    except (OSError, ValueError) as exc:
        return print_error(PROG, f"cannot listen on {opts.bind} port {opts.port}: {exc}")
    port = httpd.server_address[1]
    write_line(sys.stdout, f"Running {'HTTPS' if opts.tls else 'HTTP'} prometheus server at port {port}")

    watcher = None
    if opts.tls:
        assert opts.cert_file is not None and opts.key_file is not None
        watcher = CertificateWatcher(httpd.socket.context, opts.cert_file, opts.key_file, sys.stdout, sys.stderr)
        watcher.start()

    source = stdin if stdin is not None else (sys.stdin.buffer if sys.stdin is not None else None)
    with stop_signals(signal.SIGINT, signal.SIGTERM) as stop:
        try:
            if source is not None:
                pump(read_lines(source), metrics, sys.stdout, sys.stderr)
            write_line(sys.stderr, f"{PROG}: end of input; serving the last values until interrupted")
            threading.Event().wait()
        except STOPPED:
            pass
        finally:
            stop.hold()  # a second Ctrl-C during the shutdown must not print a traceback
            if watcher is not None:
                watcher.stop()
            httpd.shutdown()
            httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
