"""``neuron-exporter``: Prometheus metrics and a REST API for a Neuron host, read from the daemon.

    neuron-exporter [--bind ADDR] [-p/--port PORT] [--interval SECONDS] [--per-process] [--enable-k8s-info]

The command line: options, a listening socket, then the exporter put together (``api.py``) and
served (``server.py``).

* Listens on 127.0.0.1:8000 by default (``--bind 0.0.0.0`` to expose; port 0 picks a free port);
  the address actually bound is printed as one line on stderr.
* The daemon address comes from ``NEURON_EMULATOR_ADDR`` (README §The emulated instance). While it runs the
  exporter is registered with the daemon as a tool, so ``neuron-ls -a`` lists it.
* Bad flags: one line on stderr, exit 1 (``neurontools.cli``, argparse-like style). SIGINT /
  SIGTERM: clean shutdown, exit 0.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from neurontools.cli import (
    MAX_INTERVAL,
    MIN_INTERVAL,
    STOPPED,
    RaisingParser,
    UsageError,
    arguments,
    interval_seconds,
    options_or_status,
    port_number,
    print_error,
    stop_signals,
)
from neurontools.exporter.api import ExporterSpec, build_exporter, listen, serve, url
from neurontools.exporter.app import PROG
from neurontools.exporter.collector import DEFAULT_INTERVAL
from neurontools.sources.address import AddressError, resolve_address

__all__ = ["USAGE", "Options", "UsageError", "main", "parse_args"]  # UsageError: what parse_args raises

DEFAULT_BIND = "127.0.0.1"
DEFAULT_PORT = 8000  # where the official script serves and the dashboards' scrape config expects it

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
      --enable-k8s-info   label per-core series with the pod, namespace and container
                          holding the core ("" when none; docs/kubernetes.md)
      --version           print the version and exit
  -h, --help              show this help and exit

Environment:
  NEURON_EMULATOR_ADDR    emulator daemon address (socket path or http://127.0.0.1:PORT)
"""


@dataclass(frozen=True)
class Options:
    bind: str = DEFAULT_BIND
    port: int = DEFAULT_PORT
    interval: float = DEFAULT_INTERVAL
    per_process: bool = False
    help: bool = False
    version: bool = False
    enable_k8s_info: bool = False


def _bind(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text.strip("[]")))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid address {text!r} (expected an IP address, e.g. 0.0.0.0)") from None


def parse_args(argv: Sequence[str]) -> Options:
    """Raises :class:`UsageError` for a bad flag or value."""
    parser = RaisingParser(prog=PROG, add_help=False, allow_abbrev=False)
    parser.add_argument("--bind", type=_bind, default=DEFAULT_BIND)
    parser.add_argument("-p", "--port", type=port_number, default=DEFAULT_PORT)
    parser.add_argument("--interval", type=interval_seconds, default=DEFAULT_INTERVAL)
    parser.add_argument("--per-process", action="store_true")
    parser.add_argument("--enable-k8s-info", action="store_true")
    parser.add_argument("--version", action="store_true")
    parser.add_argument("-h", "--help", action="store_true")
    ns = parser.parse_args(list(argv))
    return Options(ns.bind, ns.port, ns.interval, ns.per_process, ns.help, ns.version, ns.enable_k8s_info)


def main(argv: Sequence[str] | None = None) -> int:
    argv = arguments(argv)
    try:
        with stop_signals():  # until the server takes SIGINT/SIGTERM over (server.py)
            return _main(argv)
    except STOPPED:
        return 0


def _main(argv: list[str]) -> int:
    opts = options_or_status(parse_args, argv, PROG, USAGE)
    if isinstance(opts, int):
        return opts
    try:
        address = resolve_address()
    except AddressError as exc:
        return print_error(PROG, str(exc))
    try:
        sock = listen(opts.bind, opts.port)
    except OSError as exc:
        return print_error(PROG, f"cannot listen on {opts.bind}:{opts.port}: {exc.strerror or exc}")

    spec = ExporterSpec(
        address,
        opts.interval,
        " ".join([PROG, *argv]),
        per_process=opts.per_process,
        kubernetes=opts.enable_k8s_info,
    )
    app = build_exporter(spec)
    print(f"{PROG}: serving {url(sock)}/metrics (daemon {address})", file=sys.stderr, flush=True)
    serve(app, sock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
