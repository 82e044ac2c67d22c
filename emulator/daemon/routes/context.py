"""What every route of the daemon reads: its parts, and the JSON error answers."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from fastapi.responses import JSONResponse

from emulator.daemon.api_models import ErrorBody
from emulator.daemon.faults import FaultTable
from emulator.daemon.profiles import ProfileRequests
from emulator.daemon.registry import Registry
from emulator.daemon.security import Access
from emulator.daemon.telemetry import Telemetry

# the error answers a route may give, for the OpenAPI document (401/403: docs/security.md)
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorBody} for code in (400, 401, 403, 404, 409)}


@dataclass
class DaemonInfo:
    address: str
    started_at: float = field(default_factory=time.time)
    pid: int = field(default_factory=os.getpid)


@dataclass(frozen=True)
class Daemon:
    """The daemon's parts: who holds which cores, their counters, the faults, the access rules,
    the profile requests."""

    registry: Registry
    telemetry: Telemetry
    faults: FaultTable
    access: Access
    info: DaemonInfo
    profiles: ProfileRequests = field(default_factory=ProfileRequests)


def error(status: int, message: str, **extra: object) -> JSONResponse:
    """A JSON error answer: ``{"error": message, ...}``."""
    return JSONResponse(status_code=status, content={"error": message, **extra})
