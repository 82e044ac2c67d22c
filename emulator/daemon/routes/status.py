"""Reading the daemon: its status, the instance's inventory and the counters' snapshot."""

from __future__ import annotations

import time
from dataclasses import replace

from fastapi import APIRouter, Query
from fastapi.responses import Response

from emulator.daemon.api_models import StatusModel
from emulator.daemon.routes.context import Daemon
from neurontools import __version__
from neurontools.contract.inventory import Inventory
from neurontools.contract.snapshot import SNAPSHOT, Snapshot


def router(daemon: Daemon) -> APIRouter:
    registry, telemetry, faults, info = daemon.registry, daemon.telemetry, daemon.faults, daemon.info
    api = APIRouter()

    @api.get("/v1/status", response_model=StatusModel, tags=["daemon"])
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

    @api.get("/v1/inventory", response_model=Inventory, tags=["inventory"])
    async def inventory() -> dict[str, object]:
        """Instance identity, hardware summary, devices and the processes holding them."""
        return registry.snapshot().to_dict()

    # response_model: the schema only. The answer is written by the models' own serialiser
    # (the snapshot is typed already; FastAPI's response validation would cost every call)
    @api.get("/v1/snapshot", response_model=Snapshot, tags=["telemetry"])
    async def snapshot(latencies_since: float | None = Query(None, allow_inf_nan=False)) -> Response:
        """Cumulative counters and current gauges of every runtime process, and the real host
        (docs/snapshot.md); consumers compute per-period figures from two snapshots.
        ``latencies_since`` (daemon monotonic seconds): list only executions that ended later."""
        taken = replace(
            telemetry.snapshot(registry.processes(), latencies_since), efa_bandwidth_factor=faults.efa_bandwidth_factor
        )
        return Response(content=SNAPSHOT.dump_json(taken), media_type="application/json")

    return api
