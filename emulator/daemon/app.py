"""The daemon's HTTP API, versioned under ``/v1`` (FastAPI; OpenAPI at ``/openapi.json``).

Errors are JSON objects ``{"error": "...", ...}`` with a 4xx status, never HTML or a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

from fastapi import FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from emulator.daemon.api_models import (
    AttachBody,
    EccFailure,
    EccFault,
    EfaFault,
    ErrorBody,
    ExecutionAnswer,
    ExecutionBatch,
    FaultAnswer,
    FaultBody,
    FaultState,
    JobCountersModel,
    JobStepBody,
    NanFault,
    SlowFault,
    StatusModel,
)
from emulator.daemon.faults import HARDWARE_ERRORS, FaultTable
from emulator.daemon.registry import AttachRequest, ClaimError, Registry
from emulator.daemon.security import Access, BearerTokenMiddleware
from emulator.daemon.telemetry import Telemetry
from emulator.runtime.execution import Execution
from neurontools import __version__
from neurontools.contract.inventory import Inventory, NeuronProcess, PodRef
from neurontools.contract.snapshot import SNAPSHOT, Snapshot
from neurontools.http_limits import RequestLimits

JOB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"  # a label value a dashboard can show as is
REAP_INTERVAL_S = 0.2  # a dead process releases its cores well within one second (docs/lifecycle.md)


@dataclass
class DaemonInfo:
    address: str
    started_at: float = field(default_factory=time.time)
    pid: int = field(default_factory=os.getpid)


def _error(status: int, message: str, **extra: object) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": message, **extra})


def create_app(
    registry: Registry, info: DaemonInfo, *, reap_interval: float = REAP_INTERVAL_S, access: Access | None = None
) -> FastAPI:
    """The daemon's app. ``access`` holds the rules of docs/security.md; the default (no token)
    is the Unix socket's: changes only from callers whose peer credentials allow them."""
    telemetry = Telemetry(registry.snapshot())
    faults = FaultTable([tuple(d.neuroncore_ids) for d in registry.snapshot().devices])
    access = access if access is not None else Access()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async def reaper() -> None:
            while True:
                await asyncio.sleep(reap_interval)
                for proc in registry.reap():
                    telemetry.forget(proc.pid)

        task = asyncio.create_task(reaper())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    app = FastAPI(
        title="neuron-emulator daemon",
        version=__version__,
        description="Emulated Trn1 instance: inventory, NeuronCore ownership and attached processes.",
        lifespan=lifespan,
    )
    app.add_middleware(BearerTokenMiddleware, access=access)  # TCP: 401 without the bearer token
    app.add_middleware(RequestLimits)  # 413/414 for oversized bodies and targets (docs/fuzzing.md)
    # 401/403: docs/security.md
    errors: dict[int | str, dict[str, Any]] = {code: {"model": ErrorBody} for code in (400, 401, 403, 404, 409)}

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = "not found" if exc.status_code == 404 else str(exc.detail)
        return _error(exc.status_code, message)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return _error(422, f"invalid request: {where or 'body'}: {first.get('msg', 'invalid')}")

    @app.exception_handler(ClaimError)
    async def claim_error(_: Request, exc: ClaimError) -> JSONResponse:
        return _error(exc.http_status, exc.message, nrt_status=exc.nrt_status, **exc.extra)

    @app.get("/v1/status", response_model=StatusModel, tags=["daemon"])
    async def status() -> StatusModel:
        inv = registry.snapshot()
        now = time.time()
        return StatusModel(
            daemon_pid=info.pid,
            version=__version__,
            address=info.address,
            instance_type=inv.instance.instance_type,
            instance_id=inv.instance.instance_id,
            started_at=info.started_at,
            uptime_seconds=round(now - info.started_at, 3),
            processes=len(inv.processes),
            neuroncores_total=registry.core_count,
            neuroncores_in_use=len(registry.owners()),
        )

    @app.get("/v1/inventory", response_model=Inventory, tags=["inventory"])
    async def inventory() -> dict[str, object]:
        """Instance identity, hardware summary, devices and the processes holding them."""
        return registry.snapshot().to_dict()

    @app.get("/v1/processes", response_model=list[NeuronProcess], tags=["processes"])
    async def processes() -> list[dict[str, object]]:
        return [p.to_dict() for p in registry.processes()]

    @app.get("/v1/processes/{pid}", response_model=NeuronProcess, responses=errors, tags=["processes"])
    async def process(pid: int) -> dict[str, object] | JSONResponse:
        proc = registry.get(pid)
        if proc is None:
            return _error(404, f"process {pid} is not attached")
        return proc.to_dict()

    @app.post("/v1/processes", response_model=NeuronProcess, status_code=201, responses=errors, tags=["processes"])
    async def attach(body: AttachBody, request: Request) -> dict[str, object]:
        """Register a process; a runtime process claims NeuronCores, a tool only opens the devices.
        On the Unix socket a process may attach only itself."""
        access.require_self(request, body.pid, "attach")
        proc = registry.attach(
            AttachRequest(
                pid=body.pid,
                command=body.command,
                tag=body.tag,
                runtime_version=body.runtime_version,
                kind=body.kind,
                visible_cores=None if body.visible_cores is None else tuple(body.visible_cores),
                num_cores=body.num_cores,
                origin=body.origin,
                pod=None if body.pod is None else PodRef(**body.pod.model_dump()),
            )
        )
        if body.resume is not None:  # registering again after a daemon restart (docs/lifecycle.md)
            try:
                telemetry.restore(proc, body.resume.model_dump())
            except ValueError as exc:
                registry.detach(proc.pid)
                telemetry.forget(proc.pid)
                raise ClaimError(str(exc), http_status=400, nrt_status="NRT_INVALID") from None
        return proc.to_dict()

    @app.delete("/v1/processes/{pid}", response_model=NeuronProcess, responses=errors, tags=["processes"])
    async def detach(pid: int, request: Request) -> dict[str, object] | JSONResponse:
        """Release a process's NeuronCores (what the runtime does at exit): the process itself, or
        the daemon's owner or root."""
        access.require_self(request, pid, "release", operator=True)
        proc = registry.detach(pid)
        if proc is None:
            return _error(404, f"process {pid} is not attached")
        telemetry.forget(pid)
        return proc.to_dict()

    def record(request: Request, pid: int, executions: list[Execution]) -> dict[str, Any]:
        """Count the executions; answer the faults active on the process's cores (docs/faults.md)."""
        access.require_self(request, pid, "report executions for")
        proc = registry.get(pid)
        if proc is None:
            raise ClaimError(f"process {pid} is not attached", http_status=404, nrt_status="NRT_INVALID")
        try:
            telemetry.record_executions(proc, executions)
        except ValueError as exc:
            raise ClaimError(str(exc), http_status=400, nrt_status="NRT_INVALID") from None
        for ex in executions:
            if ex.error == "hardware":  # the armed failure happened: it is spent
                faults.consume_hardware_error(ex.core)
        return {"faults": faults.state(list(proc.neuroncores))}

    @app.post("/v1/processes/{pid}/executions", response_model=ExecutionAnswer, responses=errors, tags=["telemetry"])
    async def execution(pid: int, body: Execution, request: Request) -> dict[str, Any]:
        """A step graph starting on one of the process's NeuronCores (what it costs, how it ended).
        The answer carries the faults active on the process's cores."""
        return record(request, pid, [body])

    @app.post(
        "/v1/processes/{pid}/executions/batch", response_model=ExecutionAnswer, responses=errors, tags=["telemetry"]
    )
    async def execution_batch(pid: int, body: ExecutionBatch, request: Request) -> dict[str, Any]:
        """Several step graphs of the process, each with its own start (a replayed step). The answer
        carries the faults active on the process's cores."""
        return record(request, pid, body.executions)

    @app.get("/v1/processes/{pid}/memory", responses=errors, tags=["telemetry"])
    async def memory(pid: int) -> dict[str, object]:
        """Device memory of the process per NeuronCore and category (bytes), with its peak."""
        proc = registry.get(pid)
        if proc is None:
            raise ClaimError(f"process {pid} is not attached", http_status=404, nrt_status="NRT_INVALID")
        return telemetry.memory(proc)

    @app.post("/v1/jobs/{job_id}/steps", response_model=JobCountersModel, responses=errors, tags=["telemetry"])
    async def job_step(
        body: JobStepBody, request: Request, job_id: str = Path(min_length=1, max_length=128, pattern=JOB_ID_PATTERN)
    ) -> dict[str, Any]:
        """A training job's launcher reports a step done on this node (docs/multinode.md); answers
        the job's counters here. Only the daemon's owner or root (on TCP: a token holder)."""
        access.require_operator(request, "report job steps")
        return telemetry.record_job_step(job_id, body.step_seconds, body.wait_seconds, body.samples)

    @app.post("/v1/faults/ecc", responses=errors, tags=["faults"])
    async def ecc_fault(body: EccFault, request: Request) -> dict[str, int]:
        """Inject ECC events on a device (for alert tests); returns the device's counters. Only the
        daemon's owner or root (on TCP: a token holder)."""
        access.require_operator(request, "inject faults")
        try:
            return telemetry.inject_ecc(body.neuron_device, body.event_type, body.count)
        except ValueError as exc:
            raise ClaimError(str(exc), http_status=400, nrt_status="NRT_INVALID") from None

    @app.get("/v1/faults", response_model=FaultState, tags=["faults"])
    async def fault_state() -> dict[str, Any]:
        """The faults active on the node (docs/faults.md)."""
        return faults.state()

    @app.post("/v1/faults", response_model=FaultAnswer, responses=errors, tags=["faults"])
    async def inject_fault(body: FaultBody, request: Request) -> dict[str, Any]:
        """Make the node's cores slow, produce numerical errors, count ECC events (an uncorrectable
        one fails the core's next execution) or cut the EFA bandwidth. Only the daemon's owner or
        root (on TCP: a token holder). Answers the active faults."""
        access.require_operator(request, "inject faults")
        counted: list[dict[str, int]] = []
        try:
            if isinstance(body, EfaFault):
                faults.efa(body.factor)
                return faults.state()
            cores = faults.targets(body.neuron_device, body.core)
            if isinstance(body, SlowFault):
                faults.slow(cores, body.factor)
            elif isinstance(body, NanFault):
                faults.nan(cores)
            elif isinstance(body, EccFailure):
                if body.neuron_device is None and body.core is None:
                    raise ValueError("an ECC fault needs neuron_device or core")
                for device in sorted({faults.device_of(c) for c in cores}):
                    counted.append(telemetry.inject_ecc(device, body.event_type, body.count))
                if body.event_type in HARDWARE_ERRORS:
                    faults.arm_hardware_error(cores, body.event_type)
        except ValueError as exc:
            raise ClaimError(str(exc), http_status=400, nrt_status="NRT_INVALID") from None
        return {**faults.state(), "hardware_counters": counted}

    @app.delete("/v1/faults", response_model=FaultState, responses=errors, tags=["faults"])
    async def clear_faults(request: Request) -> dict[str, Any]:
        """Clear slow cores, numerical errors, the EFA factor and pending hardware failures. Counted
        ECC events stay (counters are monotonic). Only the daemon's owner or root."""
        access.require_operator(request, "clear faults")
        faults.clear()
        return faults.state()

    # response_model: the schema only. The answer is written by the models' own serialiser
    # (the snapshot is typed already; FastAPI's response validation would cost every call)
    @app.get("/v1/snapshot", response_model=Snapshot, tags=["telemetry"])
    async def snapshot(latencies_since: float | None = Query(None, allow_inf_nan=False)) -> Response:
        """Cumulative counters and current gauges of every runtime process, and the real host
        (docs/snapshot.md); consumers compute per-period figures from two snapshots.
        ``latencies_since`` (daemon monotonic seconds): list only executions that ended later."""
        taken = replace(
            telemetry.snapshot(registry.processes(), latencies_since), efa_bandwidth_factor=faults.efa_bandwidth_factor
        )
        return Response(content=SNAPSHOT.dump_json(taken), media_type="application/json")

    return app
