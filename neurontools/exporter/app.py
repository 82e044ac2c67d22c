"""neuron-exporter's FastAPI app: Prometheus metrics and a REST API for a Neuron host, read from the daemon.

* One FastAPI app (served by ``server.py``; the command line is ``cli.py``). A background thread
  reads a daemon snapshot every ``--interval`` seconds (default 1); ``/metrics``, ``/api/v1/*`` and
  ``/readyz`` only read the latest collected state, so a slow or stopped daemon never blocks a scrape.
* ``/metrics``: the official script's compatible families (when ``neurontools.exporter.compat``
  is installed) plus the extended families of ``fields.py``, Prometheus text format 0.0.4, and
  the ``process_*``/``python_*`` families of prometheus_client's default collectors.
* ``/healthz``: 200 while the process runs. ``/readyz``: 200 once a collection succeeded and the
  last one did, else 503 with ``{"error": ...}``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import generate_latest

from neurontools import __version__
from neurontools.exporter.collector import CollectedState, Collector
from neurontools.exporter.extended import ExtendedCollector
from neurontools.exporter.rest import build_router, error_response, install_error_handlers
from neurontools.http_limits import RequestLimits
from neurontools.sources.tool_session import ToolSession

PROG = "neuron-exporter"
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"  # what generate_latest writes


class Exposition:
    """The Neuron families are rendered once per collection, on the collection thread; a scrape
    sends those bytes plus prometheus_client's small process/platform/GC families.

    ``on_scrape``: render at the first scrape after a collection instead (under the collector's
    ``publish_lock``, so all families still come from one collection). Rendering is most of a
    collection's CPU time; many exporters in one process (``neuron-emulator cluster``) that are
    scraped every 15 s then render once per scrape, not once per collection.

    ``kubernetes``: per-core families carry ``pod``/``namespace``/``container`` (``--enable-k8s-info``)."""

    def __init__(
        self, collector: Collector, *, per_process: bool, on_scrape: bool = False, kubernetes: bool = False
    ) -> None:
        self.defaults = CollectorRegistry()
        for default in (ProcessCollector, PlatformCollector, GCCollector):
            default(registry=self.defaults)
        self.neuron = CollectorRegistry()
        if collector.compat.enabled:
            self.neuron.register(collector.compat)
        self.neuron.register(
            ExtendedCollector(lambda: collector.state, per_process=per_process, kubernetes=kubernetes)
        )
        self.collector = collector
        self.on_scrape = on_scrape
        self._rendered_state = collector.state
        self._rendered = generate_latest(self.neuron)
        if not on_scrape:
            collector.on_collected = self.render

    def render(self) -> None:
        self._rendered = generate_latest(self.neuron)

    def _neuron_families(self) -> bytes:
        if not self.on_scrape:
            return self._rendered
        with self.collector.publish_lock:
            state = self.collector.state
            if state is not self._rendered_state:
                self._rendered = generate_latest(self.neuron)
                self._rendered_state = state
            return self._rendered

    def scrape(self) -> bytes:
        return generate_latest(self.defaults) + self._neuron_families()


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
