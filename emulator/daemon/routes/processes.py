"""The processes that have the devices open: attaching (claiming NeuronCores), detaching, listing."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from emulator.daemon.api_models import AttachBody
from emulator.daemon.registry import AttachRequest, ClaimError
from emulator.daemon.routes.context import ERRORS, Daemon, error
from neurontools.contract.inventory import NeuronProcess, PodRef


def _request(body: AttachBody) -> AttachRequest:
    """The registry's request from the API body: the same fields, less ``resume`` (read apart)."""
    fields = body.model_dump(exclude={"resume", "visible_cores", "pod"})
    visible = None if body.visible_cores is None else tuple(body.visible_cores)
    pod = None if body.pod is None else PodRef(**body.pod.model_dump())
    return AttachRequest(**fields, visible_cores=visible, pod=pod)


def router(daemon: Daemon) -> APIRouter:
    registry, telemetry, access, profiles = daemon.registry, daemon.telemetry, daemon.access, daemon.profiles
    api = APIRouter(tags=["processes"])

    @api.get("/v1/processes", response_model=list[NeuronProcess])
    async def processes() -> list[dict[str, object]]:
        return [p.to_dict() for p in registry.processes()]

    @api.get("/v1/processes/{pid}", response_model=NeuronProcess, responses=ERRORS)
    async def process(pid: int) -> dict[str, object] | JSONResponse:
        proc = registry.get(pid)
        if proc is None:
            return error(404, f"process {pid} is not attached")
        return proc.to_dict()

    @api.post("/v1/processes", response_model=NeuronProcess, status_code=201, responses=ERRORS)
    async def attach(body: AttachBody, request: Request) -> dict[str, object]:
        """Register a process; a runtime process claims NeuronCores, a tool only opens the devices.
        On the Unix socket a process may attach only itself."""
        access.require_self(request, body.pid, "attach")
        proc = registry.attach(_request(body))
        if body.resume is not None:  # registering again after a daemon restart (docs/lifecycle.md)
            try:
                telemetry.restore(proc, body.resume.model_dump())
            except ValueError as exc:
                registry.detach(proc.pid)
                telemetry.forget(proc.pid)
                raise ClaimError(str(exc), http_status=400, nrt_status="NRT_INVALID") from None
        return proc.to_dict()

    @api.delete("/v1/processes/{pid}", response_model=NeuronProcess, responses=ERRORS)
    async def detach(pid: int, request: Request) -> dict[str, object] | JSONResponse:
        """Release a process's NeuronCores (what the runtime does at exit): the process itself, or
        the daemon's owner or root."""
        access.require_self(request, pid, "release", operator=True)
        proc = registry.detach(pid)
        if proc is None:
            return error(404, f"process {pid} is not attached")
        telemetry.forget(pid)
        profiles.gone(pid, "the process detached")
        return proc.to_dict()

    return api
