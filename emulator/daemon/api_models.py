"""Request and status models of the daemon's ``/v1`` HTTP API (they drive its OpenAPI schema).

Inventory and process answers are described by the dataclasses of ``neurontools.inventory``
themselves — the one contract the tools parse — so their fields are written once.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ErrorBody(BaseModel):
    error: str = Field(description="one-line description of what went wrong")
    nrt_status: str | None = Field(None, description="closest Neuron runtime status name, when one applies")


class StatusModel(BaseModel):
    daemon_pid: int
    version: str
    address: str
    instance_type: str
    instance_id: str
    started_at: float
    uptime_seconds: float
    processes: int
    neuroncores_total: int
    neuroncores_in_use: int


class AttachBody(BaseModel):
    """A process opening the devices: a runtime claiming NeuronCores, or a tool that only reads."""

    model_config = ConfigDict(extra="forbid")

    pid: int = Field(gt=0)
    command: str = Field(max_length=65536)
    tag: str = Field("", max_length=255, description="NEURON_PROCESS_TAG (<=255 chars); empty = PID")
    runtime_version: str = Field("NA", max_length=64)
    kind: Literal["runtime", "tool"] = "runtime"
    visible_cores: list[int] | None = Field(None, description="explicit contiguous core ids")
    num_cores: int | None = Field(None, ge=1, description="count of free cores to grab")
    origin: str = Field("", max_length=512, description="where the selection came from, for messages")
