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


class ModelRef(BaseModel):
    model_id: int
    uuid: str
    name: str
    code_bytes: int = Field(ge=0)


class CollectiveBody(BaseModel):
    kind: str
    bytes: int = Field(ge=0)
    ranks: int = Field(ge=1)
    nodes: int = Field(1, ge=1)
    count: int = Field(1, ge=1, le=1_000_000, description="identical collectives this entry stands for")
    link_bytes: dict[Literal["intra_chip", "neuronlink", "efa"], int] | None = Field(
        None,
        description="bytes this core sent over each link type (from its ring on the topology); without it the "
        "whole payload counts on NeuronLink, or on EFA when the collective spans nodes",
    )


class ExecutionBody(BaseModel):
    """One step graph starting on a NeuronCore: its simulated cost and outcome."""

    core: int = Field(ge=0)
    start: float = Field(description="time.monotonic() of the host when the device starts it")
    device_seconds: float = Field(ge=0, description="simulated device latency incl. collectives")
    compute_seconds: float = Field(
        ge=0, description="simulated time the NeuronCore is busy with it (counts as utilization); <= device_seconds"
    )
    total_latency: float = Field(ge=0, description="latency seen by the runtime, incl. compile and queueing")
    flops: int = Field(ge=0)
    engines: dict[Literal["tensor", "vector", "scalar", "gpsimd", "dma"], float]
    outcome: Literal[
        "completed", "completed_with_err", "completed_with_num_err", "timed_out", "incorrect_input", "failed_to_queue"
    ]
    model: ModelRef | None = None
    compile_cache: dict[Literal["hits", "misses"], int]
    collectives: list[CollectiveBody] = []
    memory: dict[str, dict[str, int] | int] = Field(default_factory=dict)


class ExecutionBatch(BaseModel):
    """Several executions at once: a replaying rank sends a whole step's graphs when the step
    starts, each with its own start time (counted when it starts)."""

    executions: list[ExecutionBody] = Field(max_length=100_000)


class EccFault(BaseModel):
    """ECC events to inject on a device, as its firmware would count them."""

    model_config = ConfigDict(extra="forbid")

    neuron_device: int = Field(ge=0)
    event_type: Literal["mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected"]
    count: int = Field(1, ge=1, le=1_000_000)
