"""What runtime processes report: their executions (answered with the faults on their cores),
their device memory, and a training job's steps on this node."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path, Request

from emulator.daemon.api_models import ExecutionAnswer, ExecutionBatch, JobCountersModel, JobStepBody
from emulator.daemon.registry import ClaimError
from emulator.daemon.routes.context import ERRORS, Daemon
from emulator.runtime.execution import Execution

JOB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"  # a label value a dashboard can show as is


def _record(daemon: Daemon, request: Request, pid: int, executions: list[Execution]) -> dict[str, Any]:
    """Count the executions; answer the faults active on the process's cores (docs/faults.md)
    and, once, a profile request for the process (docs/profiling.md)."""
    daemon.access.require_self(request, pid, "report executions for")
    proc = daemon.registry.get(pid)
    if proc is None:
        raise ClaimError(f"process {pid} is not attached", http_status=404, nrt_status="NRT_INVALID")
    try:
        daemon.telemetry.record_executions(proc, executions)
    except ValueError as exc:
        raise ClaimError(str(exc), http_status=400, nrt_status="NRT_INVALID") from None
    for ex in executions:
        if ex.error == "hardware":  # the armed failure happened: it is spent
            daemon.faults.consume_hardware_error(ex.core)
    answer: dict[str, Any] = {"faults": daemon.faults.state(list(proc.neuroncores))}
    directive = daemon.profiles.hand_out(pid)
    if directive is not None:
        answer["profile"] = directive
    return answer


def router(daemon: Daemon) -> APIRouter:
    registry, telemetry, access = daemon.registry, daemon.telemetry, daemon.access
    api = APIRouter()
    errors = ERRORS

    # an answer carries "profile" only when it hands a request out (exclude_unset)
    @api.post(
        "/v1/processes/{pid}/executions",
        response_model=ExecutionAnswer,
        response_model_exclude_unset=True,
        responses=errors,
        tags=["telemetry"],
    )
    async def execution(pid: int, body: Execution, request: Request) -> dict[str, Any]:
        """A step graph starting on one of the process's NeuronCores (what it costs, how it ended).
        The answer carries the faults active on the process's cores."""
        return _record(daemon, request, pid, [body])

    @api.post(
        "/v1/processes/{pid}/executions/batch",
        response_model=ExecutionAnswer,
        response_model_exclude_unset=True,
        responses=errors,
        tags=["telemetry"],
    )
    async def execution_batch(pid: int, body: ExecutionBatch, request: Request) -> dict[str, Any]:
        """Several step graphs of the process, each with its own start (a replayed step). The answer
        carries the faults active on the process's cores."""
        return _record(daemon, request, pid, body.executions)

    @api.get("/v1/processes/{pid}/memory", responses=errors, tags=["telemetry"])
    async def memory(pid: int) -> dict[str, object]:
        """Device memory of the process per NeuronCore and category (bytes), with its peak."""
        proc = registry.get(pid)
        if proc is None:
            raise ClaimError(f"process {pid} is not attached", http_status=404, nrt_status="NRT_INVALID")
        return telemetry.memory(proc)

    @api.post("/v1/jobs/{job_id}/steps", response_model=JobCountersModel, responses=errors, tags=["telemetry"])
    async def job_step(
        body: JobStepBody, request: Request, job_id: str = Path(min_length=1, max_length=128, pattern=JOB_ID_PATTERN)
    ) -> dict[str, Any]:
        """A training job's launcher reports a step done on this node (docs/multinode.md); answers
        the job's counters here. Only the daemon's owner or root (on TCP: a token holder)."""
        access.require_operator(request, "report job steps")
        return telemetry.record_job_step(job_id, body.step_seconds, body.wait_seconds, body.samples)

    return api
