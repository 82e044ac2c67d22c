"""The daemon's HTTP API, versioned under ``/v1`` (FastAPI; OpenAPI at ``/openapi.json``).

The app: the daemon's parts (registry, telemetry, fault table, access rules), the reaper of dead
processes, the middlewares, the error answers, and one router per resource (``routes/``).
Errors are JSON objects ``{"error": "...", ...}`` with a 4xx status, never HTML or a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from emulator.daemon.faults import FaultTable
from emulator.daemon.registry import ClaimError, Registry
from emulator.daemon.routes import executions, faults, processes, profile, status
from emulator.daemon.routes.context import Daemon, DaemonInfo, error
from emulator.daemon.security import Access, BearerTokenMiddleware
from emulator.daemon.telemetry import Telemetry
from neurontools import __version__
from neurontools.http_limits import RequestLimits

__all__ = ["REAP_INTERVAL_S", "DaemonInfo", "create_app"]

REAP_INTERVAL_S = 0.2  # a dead process releases its cores well within one second (docs/lifecycle.md)


def create_app(
    registry: Registry, info: DaemonInfo, *, reap_interval: float = REAP_INTERVAL_S, access: Access | None = None
) -> FastAPI:
    """The daemon's app. ``access`` holds the rules of docs/security.md; the default (no token)
    is the Unix socket's: changes only from callers whose peer credentials allow them."""
    inventory = registry.snapshot()
    daemon = Daemon(
        registry=registry,
        telemetry=Telemetry(inventory),
        faults=FaultTable(inventory.hardware.layout),
        access=access if access is not None else Access(),
        info=info,
    )
    app = FastAPI(
        title="neuron-emulator daemon",
        version=__version__,
        description="Emulated Trn1 instance: inventory, NeuronCore ownership and attached processes.",
        lifespan=_reaping(daemon, reap_interval),
    )
    app.add_middleware(BearerTokenMiddleware, access=daemon.access)  # TCP: 401 without the bearer token
    app.add_middleware(RequestLimits)  # 413/414 for oversized bodies and targets (docs/fuzzing.md)
    _install_error_handlers(app)
    for resource in (status, processes, executions, faults, profile):
        app.include_router(resource.router(daemon))
    return app


def _reaping(daemon: Daemon, interval: float) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    """The app's lifespan: every ``interval`` seconds dead processes release their cores."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async def reaper() -> None:
            while True:
                await asyncio.sleep(interval)
                for proc in daemon.registry.reap():
                    daemon.telemetry.forget(proc.pid)
                    daemon.profiles.gone(proc.pid, "the process exited")

        task = asyncio.create_task(reaper())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return lifespan


def _install_error_handlers(app: FastAPI) -> None:
    """Every error is a JSON ``{"error": ...}`` (a claim's also says its NRT status)."""

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = "not found" if exc.status_code == 404 else str(exc.detail)
        return error(exc.status_code, message)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return error(422, f"invalid request: {where or 'body'}: {first.get('msg', 'invalid')}")

    @app.exception_handler(ClaimError)
    async def claim_error(_: Request, exc: ClaimError) -> JSONResponse:
        return error(exc.http_status, exc.message, nrt_status=exc.nrt_status, **exc.extra)
