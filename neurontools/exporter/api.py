"""neuron-exporter put together: the public API of ``neurontools.exporter``.

``neuron-exporter`` (``cli.py``) and the emulated cluster's host (``emulator/cluster/host.py``,
one exporter per node in one process) build the same exporter here: a daemon client, the tool
session that registers it with the daemon (``neuron-ls -a`` lists it), the collector, the
exposition and the app. Nothing else of the package is meant for importers outside it
(``lint-imports``: "the emulator uses only the exporter's public API").
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import FastAPI

from neurontools.exporter.app import Exposition, create_app
from neurontools.exporter.collector import Collector
from neurontools.exporter.compat_feed import CompatFeed
from neurontools.exporter.server import listen, serve, url
from neurontools.sources.address import DaemonAddress
from neurontools.sources.daemon_client import DaemonClient
from neurontools.sources.tool_session import ToolSession

__all__ = ["ExporterSpec", "build_exporter", "listen", "serve", "url"]

SESSION_TIMEOUT = 1.0  # registering / unregistering with the daemon never holds shutdown longer


@dataclass(frozen=True)
class ExporterSpec:
    """One exporter: the daemon it reads, how often, and what it exports.

    ``command``: how the daemon lists the exporter (``neuron-ls -a``). ``on_scrape``: render the
    Neuron families at the first scrape after a collection, not on the collection thread
    (``app.Exposition``; for many exporters in one process)."""

    address: DaemonAddress
    interval: float
    command: str
    per_process: bool = False
    kubernetes: bool = False
    on_scrape: bool = False


def client_timeout(interval: float) -> float:
    """The daemon client's timeout for a collection every ``interval`` seconds: two intervals, 1-5 s."""
    return min(max(2 * interval, 1.0), 5.0)


def build_exporter(spec: ExporterSpec) -> FastAPI:
    """The exporter's app; its lifespan runs the collector and unregisters from the daemon at shutdown."""
    client = DaemonClient(spec.address, timeout=client_timeout(spec.interval))
    session = ToolSession(DaemonClient(spec.address, timeout=SESSION_TIMEOUT), spec.command)
    collector = Collector(client, spec.interval, compat=CompatFeed.load(), session=session)
    exposition = Exposition(
        collector, per_process=spec.per_process, on_scrape=spec.on_scrape, kubernetes=spec.kubernetes
    )
    return create_app(collector, exposition, session=session)
