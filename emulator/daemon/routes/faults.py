"""Faults injected into the node (docs/faults.md): slow cores, numerical errors, ECC events, the
EFA bandwidth; the executions of the cores concerned get them in their answers."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from emulator.daemon.api_models import (
    EccFailure,
    EccFault,
    EfaFault,
    FaultAnswer,
    FaultBody,
    FaultState,
    NanFault,
    SlowFault,
)
from emulator.daemon.faults import HARDWARE_ERRORS
from emulator.daemon.registry import ClaimError
from emulator.daemon.routes.context import ERRORS, Daemon


def _inject(daemon: Daemon, body: FaultBody) -> list[dict[str, int]]:
    """Apply one fault; the ECC counters of the devices an ECC fault counted on. ValueError: a bad target."""
    faults = daemon.faults
    counted: list[dict[str, int]] = []
    if isinstance(body, EfaFault):
        faults.efa(body.factor)
        return counted
    cores = faults.targets(body.neuron_device, body.core)
    if isinstance(body, SlowFault):
        faults.slow(cores, body.factor)
    elif isinstance(body, NanFault):
        faults.nan(cores)
    elif isinstance(body, EccFailure):
        if body.neuron_device is None and body.core is None:
            raise ValueError("an ECC fault needs neuron_device or core")
        for device in sorted({faults.device_of(c) for c in cores}):
            counted.append(daemon.telemetry.inject_ecc(device, body.event_type, body.count))
        if body.event_type in HARDWARE_ERRORS:
            faults.arm_hardware_error(cores, body.event_type)
    return counted


def router(daemon: Daemon) -> APIRouter:
    telemetry, faults, access = daemon.telemetry, daemon.faults, daemon.access
    api = APIRouter(tags=["faults"])

    @api.post("/v1/faults/ecc", responses=ERRORS)
    async def ecc_fault(body: EccFault, request: Request) -> dict[str, int]:
        """Inject ECC events on a device (for alert tests); returns the device's counters. Only the
        daemon's owner or root (on TCP: a token holder)."""
        access.require_operator(request, "inject faults")
        try:
            return telemetry.inject_ecc(body.neuron_device, body.event_type, body.count)
        except ValueError as exc:
            raise ClaimError(str(exc), http_status=400, nrt_status="NRT_INVALID") from None

    @api.get("/v1/faults", response_model=FaultState)
    async def fault_state() -> dict[str, Any]:
        """The faults active on the node (docs/faults.md)."""
        return faults.state()

    @api.post("/v1/faults", response_model=FaultAnswer, responses=ERRORS)
    async def inject_fault(body: FaultBody, request: Request) -> dict[str, Any]:
        """Make the node's cores slow, produce numerical errors, count ECC events (an uncorrectable
        one fails the core's next execution) or cut the EFA bandwidth. Only the daemon's owner or
        root (on TCP: a token holder). Answers the active faults."""
        access.require_operator(request, "inject faults")
        try:
            counted = _inject(daemon, body)
        except ValueError as exc:
            raise ClaimError(str(exc), http_status=400, nrt_status="NRT_INVALID") from None
        return {**faults.state(), "hardware_counters": counted}

    @api.delete("/v1/faults", response_model=FaultState, responses=ERRORS)
    async def clear_faults(request: Request) -> dict[str, Any]:
        """Clear slow cores, numerical errors, the EFA factor and pending hardware failures. Counted
        ECC events stay (counters are monotonic). Only the daemon's owner or root."""
        access.require_operator(request, "clear faults")
        faults.clear()
        return faults.state()

    return api
