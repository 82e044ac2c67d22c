"""Pydantic models of the daemon's ``/v1`` HTTP API (they drive its OpenAPI schema).

The field sets mirror ``neurontools.inventory`` — that module is the contract the tools parse;
these models only describe it for OpenAPI and validate what clients send.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ErrorBody(BaseModel):
    error: str = Field(description="one-line description of what went wrong")
    nrt_status: str | None = Field(None, description="closest Neuron runtime status name, when one applies")


class InstanceModel(BaseModel):
    instance_name: str
    instance_id: str
    instance_type: str
    instance_availability_zone: str
    instance_availability_zone_id: str
    instance_region: str
    ami_id: str
    subnet_id: str


class HardwareModel(BaseModel):
    neuron_device_type: str
    neuron_device_version: str
    neuroncore_version: str
    neuron_device_count: int
    neuron_device_memory_size: int = Field(description="bytes of HBM per device")
    neuroncore_per_device_count: int
    logical_neuroncore_config: int


class DeviceModel(BaseModel):
    index: int
    nc_count: int
    neuroncore_ids: list[int] = Field(description="global NeuronCore ids of the device")
    memory_size: int = Field(description="bytes of device HBM")
    connected_to: list[int] | None = Field(description="NeuronLink neighbours (up, left, down, right)")
    bdf: str = Field(description="PCI address, 0000:bb:dd.f")
    cpu_affinity: str
    numa_node: int


class ProcessModel(BaseModel):
    pid: int
    command: str
    tag: str = Field(description="NEURON_PROCESS_TAG, or the PID")
    runtime_version: str = Field(description="Neuron runtime version, NA for tools")
    kind: Literal["runtime", "tool"]
    neuroncores: list[int] = Field(description="global NeuronCore ids owned by the process")
    attached_at: float = Field(description="Unix time of attach")


class InventoryModel(BaseModel):
    instance: InstanceModel
    hardware: HardwareModel
    devices: list[DeviceModel]
    processes: list[ProcessModel]


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
