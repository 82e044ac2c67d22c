"""Request and status models of the daemon's ``/v1`` HTTP API (they drive its OpenAPI schema).

Inventory and process answers are described by the dataclasses of ``neurontools.contract.inventory``
themselves — the one contract the tools parse — and an execution report by
``emulator.runtime.execution.Execution``, the one type processes build, so their fields are written once.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from emulator.runtime import execution
from emulator.runtime.execution import MAX_COUNT, Count, Execution

# the bounds of docs/fuzzing.md (emulator/runtime/execution.py), finite
Seconds = Annotated[execution.Seconds, Field(allow_inf_nan=False)]


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


class PodBody(BaseModel):
    """The Kubernetes container a runtime process runs in (docs/kubernetes.md): what the kubelet's
    pod-resources API says about the holder of a NeuronCore. Lengths: Kubernetes' name limits."""

    model_config = ConfigDict(extra="forbid")

    pod_name: str = Field(min_length=1, max_length=253, description="pod name (DNS subdomain, <=253 chars)")
    namespace: str = Field(min_length=1, max_length=63, description="namespace (DNS label, <=63 chars)")
    container_name: str = Field("", max_length=63, description="container name ('' when not known)")


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
    pod: PodBody | None = Field(
        None, description="the Kubernetes container of a runtime process (POD_NAME, POD_NAMESPACE, CONTAINER_NAME)"
    )


class ExecutionBatch(BaseModel):
    """Several executions at once: a replaying rank sends a whole step's graphs when the step
    starts, each with its own start time (counted when it starts)."""

    executions: list[Execution] = Field(max_length=100_000)


class JobStepBody(BaseModel):
    """One step of a training job done on this node, as its launcher saw it (docs/multinode.md)."""

    model_config = ConfigDict(extra="forbid")

    step: int = Field(ge=1, le=MAX_COUNT)
    step_seconds: Seconds = Field(description="the node's ranks' own time for the step (start to the last done)")
    wait_seconds: Seconds = Field(description="time the node then waited for slower nodes to end the step")
    samples: Count = Field(description="sequences the whole job trained in the step (its global batch)")
    ranks: int = Field(ge=1, le=1_000_000, description="the job's ranks on this node")


class JobCountersModel(BaseModel):
    job_id: str
    steps: int
    step_seconds: float
    wait_seconds: float
    samples: int


class EccFault(BaseModel):
    """ECC events to inject on a device, as its firmware would count them."""

    model_config = ConfigDict(extra="forbid")

    neuron_device: int = Field(ge=0)
    event_type: Literal["mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected"]
    count: int = Field(1, ge=1, le=1_000_000)


# -- faults of the node (docs/faults.md) -------------------------------------------------------
Core = Annotated[int, Field(ge=0, le=MAX_COUNT)]


class SlowFault(BaseModel):
    """The NeuronCores run slower: every execution takes ``factor`` x its modelled device time."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["slow"]
    factor: float = Field(gt=1, le=1000, allow_inf_nan=False)
    neuron_device: int | None = Field(None, ge=0, description="every core of this device")
    core: Core | None = Field(None, description="this core only (default: every core of the node or device)")


class NanFault(BaseModel):
    """Executions complete with a numerical error (``completed_with_num_err``) until cleared."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["nan"]
    neuron_device: int | None = Field(None, ge=0)
    core: Core | None = None


class EccFailure(BaseModel):
    """ECC events counted on a device; an uncorrectable one also fails the next execution on the
    core (``core``, or every core of ``neuron_device``) with the runtime's hardware error."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["ecc"]
    event_type: Literal["mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected"]
    count: int = Field(1, ge=1, le=1_000_000)
    neuron_device: int | None = Field(None, ge=0)
    core: Core | None = None


class EfaFault(BaseModel):
    """Inter-node (EFA) bandwidth factor of the node; applies to inter-node collectives."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["efa"]
    factor: float = Field(gt=0, le=1, allow_inf_nan=False)


FaultBody = Annotated[SlowFault | NanFault | EccFailure | EfaFault, Field(discriminator="kind")]


class CoreFaultEntry(BaseModel):
    """One core's faults (``CoreFaults.to_wire`` writes it, ``CoreFaults.from_answer`` reads it)."""

    core: int
    slow_factor: float = Field(description="executions take this many times their modelled device time")
    nan: bool = Field(description="executions complete with a numerical error")
    hardware_error: str | None = Field(
        description="uncorrectable ECC event armed on the core: its next execution fails"
    )


class FaultState(BaseModel):
    """The active faults of the node (cores without any are left out)."""

    efa_bandwidth_factor: float
    cores: list[CoreFaultEntry]


class FaultAnswer(FaultState):
    """The active faults after a change, and the ECC counters of the devices an ECC fault counted on."""

    hardware_counters: list[dict[str, int]] = Field(default_factory=list)


# -- profiling a running process (docs/profiling.md) --------------------------------------------
MAX_PROFILE_STEPS = 10_000


class ProfileBody(BaseModel):
    """Capture the next ``steps`` steps of a process into ``output_dir`` (an absolute path)."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(ge=1, le=MAX_PROFILE_STEPS, description="steps to capture, from the process's next one")
    output_dir: str = Field(
        min_length=1, max_length=4096, pattern=r"^/[^\x00]*$", description="absolute directory the process writes into"
    )


class ProfileDone(BaseModel):
    """A process reports the capture it was asked for: its capture directories, or why it failed."""

    model_config = ConfigDict(extra="forbid")

    id: int = Field(ge=1, le=MAX_COUNT)
    dirs: list[Annotated[str, Field(max_length=4096)]] = Field(default_factory=list, max_length=1024)
    error: str | None = Field(None, max_length=4096)


class ProfileDirective(BaseModel):
    """A profile request handed to the process in an execution answer (once)."""

    id: int
    steps: int
    output_dir: str


class ProfileState(BaseModel):
    """A process's latest profile request."""

    pid: int
    id: int
    state: Literal["pending", "capturing", "done", "failed"]
    steps: int
    output_dir: str
    dirs: list[str] = Field(default_factory=list, description="the capture directories written (when done)")
    error: str | None = Field(None, description="why the capture failed (when failed)")


class ExecutionAnswer(BaseModel):
    """The daemon's answer to an execution report: the faults active on the process's cores,
    which the process applies from its next execution on (docs/faults.md); once, a profile
    request for the process (docs/profiling.md)."""

    faults: FaultState
    profile: ProfileDirective | None = None
