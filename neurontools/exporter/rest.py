"""REST API under ``/api/v1/`` (OpenAPI at ``/openapi.json``): answers from the collected state only.

* ``GET /api/v1/instance``    identity, hardware summary and exporter status
* ``GET /api/v1/devices``     Neuron devices: HBM by category, ECC events, PCI/NUMA details
* ``GET /api/v1/neuroncores`` NeuronCores: owner, busy ratios over the last period, FLOP/s, HBM
* ``GET /api/v1/processes``   Neuron runtime processes with their cumulative counters
* ``GET /api/v1/report``      the latest neuron-monitor report (schema and encoding of docs/reference/neuron-monitor.md)
* ``GET /api/v1/history``     ``?metric=NAME[&neuroncore=N][&since=UNIX_TIME]`` from the ring buffer
* ``GET /api/v1/history/metrics`` the metrics ``history`` knows

Errors are ``{"error": "..."}``: 400 for a bad parameter, 404 for an unknown path, 503 while
nothing has been collected yet.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from neurontools import __version__
from neurontools.contract.inventory import HardwareInfo, InstanceIdentity
from neurontools.contract.schema import CORE_MEMORY_KEYS, HW_COUNTER_KEYS
from neurontools.contract.snapshot_models import ProcessSnapshot
from neurontools.exporter.collector import CollectedState
from neurontools.exporter.history import HISTORY_ROWS, History
from neurontools.report import fields
from neurontools.report.encoding import encode_report

PREFIX = "/api/v1"


# -- response models ------------------------------------------------------------------------------
# Field descriptions come from the field table (report.fields): the exposition's HELP texts and
# these cannot drift apart.


class ErrorBody(BaseModel):
    error: str


class InstanceResponse(BaseModel):
    instance: InstanceIdentity  # the inventory dataclasses: their fields are written once
    hardware: HardwareInfo
    exporter_version: str
    source_up: bool = Field(description=fields.SOURCE_UP.text)
    source_error: str = Field(description=fields.SOURCE_ERROR.text)
    collection_interval_seconds: float
    last_collection_timestamp_seconds: float | None = Field(description=fields.LAST_COLLECTION.text)


class DeviceResponse(BaseModel):
    neuron_device: int
    neuroncores: list[int]
    hbm_total_bytes: int = Field(description=fields.DEVICE_HBM_TOTAL.text)
    hbm_used_bytes: dict[str, int] = Field(description=fields.DEVICE_HBM_USED.text)
    ecc_events: dict[str, int] = Field(description=fields.DEVICE_ECC_EVENTS.text)
    bdf: str | None = Field(default=None, description=fields.DEVICE_BDF.text)
    numa_node: int | None = None
    cpu_affinity: str | None = None
    connected_to: list[int] | None = None


class Owner(BaseModel):
    pid: int
    runtime_tag: str


class NeuronCoreResponse(BaseModel):
    neuroncore: int
    neuron_device: int
    owner: Owner | None = Field(description=fields.CORE_OWNER.text)
    period_seconds: float | None = Field(description=fields.PERIOD_SECONDS.text)
    utilization: float | None = Field(description=fields.CORE_UTILIZATION.text)
    engine_utilization: dict[str, float] | None = Field(description=fields.CORE_ENGINE_UTILIZATION.text)
    flops_per_second: float | None = Field(description=fields.CORE_FLOPS_PER_SECOND.text)
    hbm_used_bytes: dict[str, int] = Field(description=fields.CORE_HBM_USED.text)
    busy_seconds_total: float = Field(description=fields.CORE_BUSY_SECONDS.text)
    flops_total: int = Field(description=fields.CORE_FLOPS.text)


class CpuSeconds(BaseModel):
    user: float
    system: float


class ProcessResponse(BaseModel):
    pid: int
    runtime_tag: str
    kind: str = Field(description=fields.PROCESS_KIND.text)
    command: str
    runtime_version: str
    neuroncores: list[int]
    cpu_seconds: CpuSeconds | None = None
    executions: dict[str, int] = Field(default_factory=dict, description=fields.PROCESS_EXECUTIONS.text)
    errors: dict[str, int] = Field(default_factory=dict, description=fields.PROCESS_ERRORS.text)
    compile_cache: dict[str, int] = Field(default_factory=dict, description=fields.PROCESS_COMPILE_CACHE.text)
    hbm_used_bytes: dict[str, dict[str, int]] = Field(default_factory=dict, description=fields.PROCESS_HBM_USED.text)
    host_memory_bytes: int = 0
    neuroncore_utilization: dict[str, float] | None = Field(
        default=None, description=fields.PROCESS_CORE_UTILIZATION.text
    )


class HistoryMetric(BaseModel):
    name: str
    unit: str
    per_neuroncore: bool
    description: str


class HistorySeries(BaseModel):
    neuroncore: int | None
    points: list[tuple[float, float]] = Field(description=fields.HISTORY_POINTS.text)


class HistoryResponse(BaseModel):
    metric: str
    unit: str
    step_seconds: float = Field(description=fields.HISTORY_STEP.text)
    capacity: int = Field(description=fields.HISTORY_CAPACITY.text)
    series: list[HistorySeries]


# -- history metrics ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Metric:
    unit: str
    per_core: bool
    description: str


# Names, units and descriptions from the field table; per NeuronCore first, then the host.
HISTORY_METRICS: dict[str, _Metric] = {
    q.key: _Metric(q.unit, per_core, q.text_over(fields.EACH_STEP))
    for per_core, series in ((True, fields.HISTORY_PER_CORE), (False, fields.HISTORY_HOST))
    for q in series
}


# -- errors ---------------------------------------------------------------------------------------


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def error_response(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": message})


def _validation_message(exc: RequestValidationError) -> str:
    first = exc.errors()[0] if exc.errors() else {}
    loc = [str(p) for p in first.get("loc", ())]
    where = f"{loc[0]} parameter {loc[-1]!r}" if len(loc) >= 2 else "request"
    got = first.get("input")
    shown = f" (got {got!r})" if isinstance(got, str | int | float) else ""
    return f"invalid {where}: {first.get('msg', 'invalid value')}{shown}"


def install_error_handlers(app: FastAPI) -> None:
    """Every error becomes ``{"error": "..."}``: no HTML, no traceback."""

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, "not found" if exc.status_code == 404 else str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(400, _validation_message(exc))


# -- views ----------------------------------------------------------------------------------------


def _collected(state: CollectedState) -> CollectedState:
    if state.snapshot is None:
        raise ApiError(503, f"no data collected from the daemon yet: {state.error}")
    return state


def instance_view(state: CollectedState) -> InstanceResponse:
    snap = _collected(state).snapshot
    assert snap is not None
    return InstanceResponse(
        instance=snap.instance,
        hardware=snap.hardware,
        exporter_version=__version__,
        source_up=state.source_up,
        source_error=state.error,
        collection_interval_seconds=state.interval,
        last_collection_timestamp_seconds=state.last_success,
    )


def devices_view(state: CollectedState) -> list[DeviceResponse]:
    period = _collected(state).measured
    assert period is not None
    snap = period.cur
    inventory = {d.index: d for d in state.inventory.devices} if state.inventory is not None else {}
    ecc = {c.neuron_device_index: c for c in snap.hardware_counters}
    out = []
    for index in range(snap.hardware.neuron_device_count):
        cores = list(snap.hardware.layout.cores_of(index))
        used = period.hbm_of_device(index)
        dev = inventory.get(index)
        counters = ecc.get(index)
        out.append(
            DeviceResponse(
                neuron_device=index,
                neuroncores=cores,
                hbm_total_bytes=snap.hardware.neuron_device_memory_size,
                hbm_used_bytes=used,
                ecc_events={k: getattr(counters, k) if counters else 0 for k in HW_COUNTER_KEYS},
                bdf=dev.bdf if dev else None,
                numa_node=dev.numa_node if dev else None,
                cpu_affinity=dev.cpu_affinity if dev else None,
                connected_to=list(dev.connected_to) if dev and dev.connected_to is not None else None,
            )
        )
    return out


def neuroncores_view(state: CollectedState) -> list[NeuronCoreResponse]:
    period = _collected(state).measured
    assert period is not None
    rated = state.rated
    out = []
    for core in range(period.core_count):
        work = rated.cores.get(core) if rated is not None else None
        proc = period.owners.get(core)
        out.append(
            NeuronCoreResponse(
                neuroncore=core,
                neuron_device=period.cur.hardware.layout.device_of(core),
                owner=Owner(pid=proc.pid, runtime_tag=proc.tag) if proc else None,
                period_seconds=state.period,
                utilization=work.utilization if work else None,
                engine_utilization=work.engine_utilizations if work else None,
                flops_per_second=work.flops_per_second if work else None,
                hbm_used_bytes=period.hbm.get(core, dict.fromkeys(CORE_MEMORY_KEYS, 0)),
                busy_seconds_total=state.totals.busy.get(core, 0.0),
                flops_total=state.totals.flops.get(core, 0),
            )
        )
    return out


def _process_utilization(state: CollectedState, proc: ProcessSnapshot) -> dict[str, float] | None:
    """Busy share of each core the process owns over the last period; None for a process new
    since the period's start (its counters have no baseline yet)."""
    rated = state.rated
    process = rated.process(proc.pid) if rated is not None and rated.seconds > 0 else None
    if process is None or process.before is None or not process.before.is_runtime:
        return None
    return {str(c): process.cores[c].utilization if c in process.cores else 0.0 for c in proc.neuroncores}


def processes_view(state: CollectedState) -> list[ProcessResponse]:
    snap = _collected(state).snapshot
    assert snap is not None
    out = []
    for p in snap.processes:
        entry = ProcessResponse(
            pid=p.pid,
            runtime_tag=p.tag,
            kind=p.kind,
            command=p.command,
            runtime_version=p.runtime_version,
            neuroncores=list(p.neuroncores),
        )
        if p.is_runtime:
            entry.cpu_seconds = CpuSeconds(user=p.cpu.user, system=p.cpu.system) if p.cpu else None
            entry.executions = vars(p.executions).copy()
            entry.errors = vars(p.errors).copy()
            entry.compile_cache = {"hits": p.compile_cache.hits, "misses": p.compile_cache.misses}
            entry.hbm_used_bytes = {
                str(core): {cat: getattr(usage, cat) for cat in CORE_MEMORY_KEYS}
                for core, usage in p.memory.cores.items()
            }
            entry.host_memory_bytes = p.memory.host.total
            entry.neuroncore_utilization = _process_utilization(state, p)
        out.append(entry)
    return out


def history_view(
    state: CollectedState, history: History, step: float, metric: str, neuroncore: int | None, since: float | None
) -> HistoryResponse:
    spec = HISTORY_METRICS.get(metric)
    if spec is None:
        raise ApiError(400, f"unknown metric {metric!r} (expected one of {', '.join(HISTORY_METRICS)})")
    if since is not None:
        if not math.isfinite(since):
            raise ApiError(400, f"invalid query parameter 'since': expected a Unix time in seconds, got {since!r}")
        if since > time.time():
            raise ApiError(400, f"invalid query parameter 'since': {since!r} is in the future")
    snap = _collected(state).snapshot
    assert snap is not None
    count = snap.hardware.layout.core_count
    if neuroncore is not None:
        if not spec.per_core:
            raise ApiError(400, f"metric {metric!r} is not per NeuronCore: leave out 'neuroncore'")
        if not 0 <= neuroncore < count:
            raise ApiError(400, f"neuroncore {neuroncore} out of range (this instance has NeuronCores 0-{count - 1})")
    if spec.per_core:
        cores: list[int | None] = [neuroncore] if neuroncore is not None else list(range(count))
    else:
        cores = [None]
    start = since if since is not None else -math.inf
    series = [
        HistorySeries(neuroncore=c, points=[(p.time, p.value) for p in history.points((metric, c), start)])
        for c in cores
    ]
    return HistoryResponse(metric=metric, unit=spec.unit, step_seconds=step, capacity=HISTORY_ROWS, series=series)


# -- routes ---------------------------------------------------------------------------------------

_ERRORS: dict[int | str, dict[str, Any]] = {400: {"model": ErrorBody}, 503: {"model": ErrorBody}}


def build_router(state: Callable[[], CollectedState], history: History, step: float) -> APIRouter:
    router = APIRouter(prefix=PREFIX, tags=["neuron-exporter"], responses=_ERRORS)

    @router.get("/instance", response_model=InstanceResponse)
    def instance() -> InstanceResponse:
        """EC2 identity and Neuron hardware of the watched instance, and the exporter's own status."""
        return instance_view(state())

    @router.get("/devices", response_model=list[DeviceResponse])
    def devices() -> list[DeviceResponse]:
        """Every Neuron device with its HBM use by category."""
        return devices_view(state())

    @router.get("/neuroncores", response_model=list[NeuronCoreResponse])
    def neuroncores() -> list[NeuronCoreResponse]:
        """Every NeuronCore: owner, utilization and engine ratios over the last period, FLOP/s, HBM."""
        return neuroncores_view(state())

    @router.get("/processes", response_model=list[ProcessResponse])
    def processes() -> list[ProcessResponse]:
        """Neuron runtime processes attached to the daemon, with their cumulative counters."""
        return processes_view(state())

    @router.get("/report", response_model=dict[str, Any])
    def report() -> Response:
        """The latest neuron-monitor report (default groups, period = the collection interval)."""
        current = _collected(state()).report
        assert current is not None
        return Response(encode_report(current), media_type="application/json")

    @router.get("/history/metrics", response_model=list[HistoryMetric])
    def history_metrics() -> list[HistoryMetric]:
        """The metrics ``/history`` serves."""
        return [
            HistoryMetric(name=n, unit=m.unit, per_neuroncore=m.per_core, description=m.description)
            for n, m in HISTORY_METRICS.items()
        ]

    @router.get("/history", response_model=HistoryResponse)
    def history_route(
        metric: Annotated[str, Query(description="a name from /api/v1/history/metrics")],
        neuroncore: Annotated[int | None, Query(description="one NeuronCore (default: all)")] = None,
        since: Annotated[float | None, Query(description="Unix time: only points at or after it")] = None,
    ) -> HistoryResponse:
        """Recent values of one metric (in memory, at most one point per second, 3600 points per series)."""
        return history_view(state(), history, step, metric, neuroncore, since)

    return router
