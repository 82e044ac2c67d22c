"""Request and status models of the daemon's ``/v1`` HTTP API (they drive its OpenAPI schema).

Inventory and process answers are described by the dataclasses of ``neurontools.inventory``
themselves — the one contract the tools parse — so their fields are written once.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

# Bounds of the numbers a process reports (docs/fuzzing.md): counters fit the runtime's 64-bit
# integers, so every consumer can turn a sum of them into a float; durations are finite and at
# most a day per execution, so the busy-time sums stay finite and JSON can carry them.
MAX_COUNT = 2**63 - 1
MAX_SECONDS = 86_400.0
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)]


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


class ResumeCore(BaseModel):
    """Device memory a process holds on one of its NeuronCores, bytes by category."""

    model_config = ConfigDict(extra="forbid")

    core: int = Field(ge=0, le=MAX_COUNT)
    memory: dict[Literal["constants", "model_code", "model_shared_scratchpad", "runtime_memory", "tensors"], Count]
    peak: Count = 0


class ResumeModel(BaseModel):
    """A model a process has loaded on one of its NeuronCores."""

    model_config = ConfigDict(extra="forbid")

    core: int = Field(ge=0, le=MAX_COUNT)
    model_id: Count
    uuid: str = Field(max_length=128)
    name: str = Field(max_length=4096)
    code_bytes: Count


class ResumeState(BaseModel):
    """What a process already holds when it registers again with a restarted daemon
    (docs/lifecycle.md): device memory and loaded models. Gauges only: a new daemon's counters
    start from zero."""

    model_config = ConfigDict(extra="forbid")

    cores: list[ResumeCore] = Field(default_factory=list, max_length=1024)
    models: list[ResumeModel] = Field(default_factory=list, max_length=100_000)


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
    resume: ResumeState | None = Field(
        None, description="a runtime registering again with a restarted daemon: what it holds on its cores"
    )


class CompileCacheCounts(BaseModel):
    """The process's compile-cache counters so far (both are required: the daemon keeps the latest)."""

    hits: Count
    misses: Count


class ModelRef(BaseModel):
    model_id: Count
    uuid: str = Field(max_length=128)
    name: str = Field(max_length=4096)
    code_bytes: Count


class CollectiveBody(BaseModel):
    kind: str = Field(max_length=64)
    bytes: Count
    ranks: int = Field(ge=1, le=1_000_000)
    nodes: int = Field(1, ge=1, le=1_000_000)
    count: int = Field(1, ge=1, le=1_000_000, description="identical collectives this entry stands for")
    link_bytes: dict[Literal["intra_chip", "neuronlink", "efa"], Count] | None = Field(
        None,
        description="bytes this core sent over each link type (from its ring on the topology); without it the "
        "whole payload counts on NeuronLink, or on EFA when the collective spans nodes",
    )


class ExecutionBody(BaseModel):
    """One step graph starting on a NeuronCore: its simulated cost and outcome."""

    core: int = Field(ge=0, le=MAX_COUNT)
    start: float = Field(
        ge=0, le=1e12, allow_inf_nan=False, description="time.monotonic() of the host when the device starts it"
    )
    device_seconds: Seconds = Field(description="simulated device latency incl. collectives")
    compute_seconds: Seconds = Field(
        description="simulated time the NeuronCore is busy with it (counts as utilization); <= device_seconds"
    )
    total_latency: Seconds = Field(description="latency seen by the runtime, incl. compile and queueing")
    flops: Count
    engines: dict[Literal["tensor", "vector", "scalar", "gpsimd", "dma"], Seconds]
    outcome: Literal[
        "completed", "completed_with_err", "completed_with_num_err", "timed_out", "incorrect_input", "failed_to_queue"
    ]
    model: ModelRef | None = None
    compile_cache: CompileCacheCounts
    collectives: list[CollectiveBody] = []
    memory: dict[str, dict[str, Count] | Count] = Field(default_factory=dict)


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
