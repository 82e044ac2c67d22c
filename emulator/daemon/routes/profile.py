"""Profiling a running process without restarting it (docs/profiling.md §Profiling a running
process): ask (``POST /v1/processes/{pid}/profile``), follow (``GET``), and the process's report
(``POST .../profile/done``). The request reaches the process in the answer to its next execution
report (``routes/executions.py``); the state is ``emulator/daemon/profiles.py``'s."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from emulator.daemon.api_models import ProfileBody, ProfileDone, ProfileState
from emulator.daemon.profiles import ProfileConflict
from emulator.daemon.routes.context import ERRORS, Daemon, error
from neurontools.contract.inventory import RUNTIME


def router(daemon: Daemon) -> APIRouter:
    registry, profiles, access = daemon.registry, daemon.profiles, daemon.access
    api = APIRouter(tags=["profile"])

    @api.post(
        "/v1/processes/{pid}/profile",
        status_code=202,
        response_model=ProfileState,
        response_model_exclude_unset=True,
        responses=ERRORS,
    )
    async def ask(pid: int, body: ProfileBody, request: Request) -> dict[str, Any] | JSONResponse:
        """Capture the process's next ``steps`` steps into ``output_dir`` (the process writes its
        capture directory there, as under NEURON_RT_INSPECT_ENABLE=1). Only the process itself, the
        daemon's owner or root. 409 while a request for the process is pending or capturing."""
        access.require_self(request, pid, "profile", operator=True)
        proc = registry.get(pid)
        if proc is None or proc.kind != RUNTIME:
            return error(404, f"process {pid} is not an attached runtime process")
        try:
            return profiles.request(pid, body.steps, body.output_dir).to_dict()
        except ProfileConflict as exc:
            return error(409, str(exc))

    @api.get(
        "/v1/processes/{pid}/profile", response_model=ProfileState, response_model_exclude_unset=True, responses=ERRORS
    )
    async def state(pid: int) -> dict[str, Any] | JSONResponse:
        """The process's latest profile request: pending, capturing, done (with the capture
        directories) or failed (with why)."""
        req = profiles.get(pid)
        if req is None:
            return error(404, f"no profile was requested for process {pid}")
        return req.to_dict()

    @api.post(
        "/v1/processes/{pid}/profile/done",
        response_model=ProfileState,
        response_model_exclude_unset=True,
        responses=ERRORS,
    )
    async def done(pid: int, body: ProfileDone, request: Request) -> dict[str, Any] | JSONResponse:
        """The process reports the capture it was handed: its directories, or an error."""
        access.require_self(request, pid, "report the profile of", operator=True)
        try:
            return profiles.finish(pid, body.id, body.dirs, body.error).to_dict()
        except KeyError as exc:
            return error(404, str(exc.args[0]))
        except ProfileConflict as exc:
            return error(409, str(exc))

    return api
