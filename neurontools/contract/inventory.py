"""Typed view of what a Neuron host has: its identity, its devices and the processes holding them.

This is the wire format of the emulator daemon's ``/v1/inventory`` and ``/v1/processes``
resources, and the input of ``neuron-ls``. It is plain data (no I/O): a source fills it, the
tools render it. The instance and hardware dictionaries use the key names of neuron-monitor's
``instance_info`` and ``neuron_hardware_info`` objects (docs/reference/neuron-monitor.md
§Always-present objects) without the ``error`` key, so the report builder can copy them as they are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any, Final, Protocol, TypeVar

# Runtime version shown for processes that do not use the Neuron runtime (tools), as neuron-ls -a does.
NOT_A_RUNTIME = "NA"

RUNTIME: Final = "runtime"
TOOL: Final = "tool"


class JsonRecord:
    """A dataclass whose JSON object is its fields, as the daemon writes it (``asdict``)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]  # every subclass is a dataclass


class _HasPid(Protocol):
    @property
    def pid(self) -> int: ...


_P = TypeVar("_P", bound=_HasPid)


def first_by_pid(items: Iterable[_P]) -> dict[int, _P]:
    """Each PID's first item, in order (a process listed twice is looked up as its first)."""
    by_pid: dict[int, _P] = {}
    for item in items:
        by_pid.setdefault(item.pid, item)
    return by_pid


PROCESS_KINDS = (RUNTIME, TOOL)


class InventoryError(ValueError):
    """The inventory data is malformed (missing key, wrong type)."""


@dataclass(frozen=True)
class InstanceIdentity(JsonRecord):
    """EC2 identity of the host, keys as neuron-monitor's ``instance_info``."""

    instance_name: str
    instance_id: str
    instance_type: str
    instance_availability_zone: str
    instance_availability_zone_id: str
    instance_region: str
    ami_id: str
    subnet_id: str


@dataclass(frozen=True)
class CoreLayout:
    """The one place of the core/device arithmetic: global NeuronCore ids run device by device,
    ``cores_per_device`` each (docs/reference/trn1-platform.md §Devices and NeuronCores). The
    tools take it from ``HardwareInfo.layout``, the emulator from its ``InstanceType.layout``."""

    device_count: int
    cores_per_device: int

    @property
    def core_count(self) -> int:
        """NeuronCores of the instance."""
        return self.device_count * self.cores_per_device

    def device_of(self, core: int) -> int:
        """The device a global NeuronCore id belongs to."""
        return core // max(self.cores_per_device, 1)

    def local_core(self, core: int) -> int:
        """A global NeuronCore id's index on its device (``NC`` of ``ND 3:NC 1``)."""
        return core % max(self.cores_per_device, 1)

    def core_id(self, device: int, local: int) -> int:
        """The global NeuronCore id of core ``local`` of ``device``."""
        return device * self.cores_per_device + local

    def cores_of(self, device: int) -> range:
        """The global NeuronCore ids of one device."""
        return range(self.core_id(device, 0), self.core_id(device + 1, 0))


@dataclass(frozen=True)
class HardwareInfo(JsonRecord):
    """Neuron hardware summary, keys as neuron-monitor's ``neuron_hardware_info``."""

    neuron_device_type: str
    neuron_device_version: str
    neuroncore_version: str
    neuron_device_count: int
    neuron_device_memory_size: int
    neuroncore_per_device_count: int
    logical_neuroncore_config: int

    @cached_property
    def layout(self) -> CoreLayout:
        """The core/device arithmetic of this hardware."""
        return CoreLayout(self.neuron_device_count, self.neuroncore_per_device_count)


@dataclass(frozen=True)
class Device:
    """One Neuron device (a Trainium chip) as neuron-ls shows it."""

    index: int
    nc_count: int
    neuroncore_ids: tuple[int, ...]
    memory_size: int  # bytes of device HBM
    connected_to: tuple[int, ...] | None  # neighbours in firmware order; None on a single-device host
    bdf: str  # full PCI address, 0000:bb:dd.f
    cpu_affinity: str  # Linux cpulist
    numa_node: int  # -1 when the host has no NUMA

    @property
    def short_bdf(self) -> str:
        """``bb:dd.f`` form used by neuron-ls -w/-a/-t."""
        return self.bdf.split(":", 1)[1] if self.bdf.count(":") == 2 else self.bdf

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["neuroncore_ids"] = list(self.neuroncore_ids)
        d["connected_to"] = None if self.connected_to is None else list(self.connected_to)
        return d


@dataclass(frozen=True)
class PodRef(JsonRecord):
    """The Kubernetes container a runtime process runs in, as the kubelet's pod-resources API
    names the holder of a NeuronCore (docs/kubernetes.md §Which pod holds a core)."""

    pod_name: str
    namespace: str
    container_name: str


@dataclass(frozen=True)
class NeuronProcess:
    """A process that has Neuron devices open.

    ``kind`` is ``runtime`` for a training/inference process holding NeuronCores, ``tool`` for a
    monitoring tool (neuron-ls, neuron-top, neuron-monitor) that opened the devices to read them.
    """

    pid: int
    command: str
    tag: str
    runtime_version: str
    kind: str = RUNTIME
    neuroncores: tuple[int, ...] = ()
    attached_at: float = 0.0
    pod: PodRef | None = None  # None: not started by Kubernetes (or no pod information)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["neuroncores"] = list(self.neuroncores)
        return d


@dataclass(frozen=True)
class Inventory:
    instance: InstanceIdentity
    hardware: HardwareInfo
    devices: tuple[Device, ...]
    processes: tuple[NeuronProcess, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "instance": self.instance.to_dict(),
            "hardware": self.hardware.to_dict(),
            "devices": [d.to_dict() for d in self.devices],
            "processes": [p.to_dict() for p in self.processes],
        }

    def with_processes(self, processes: Iterable[NeuronProcess]) -> Inventory:
        return Inventory(self.instance, self.hardware, self.devices, tuple(processes))

    def device_of_core(self, core: int) -> int:
        return self.hardware.layout.device_of(core)

    def processes_on(self, device: Device, *, include_tools: bool) -> list[NeuronProcess]:
        """Processes holding ``device``, in attach order (then PID).

        A runtime process holds a device when it owns one of its NeuronCores. A tool opens every
        device, so with ``include_tools`` it is listed on each of them.
        """
        cores = set(device.neuroncore_ids)
        held = [
            p
            for p in self.processes
            if (p.kind == RUNTIME and cores.intersection(p.neuroncores)) or (include_tools and p.kind == TOOL)
        ]
        return sorted(held, key=lambda p: (p.attached_at, p.pid))


def _take(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(data, Mapping) or key not in data:
        raise InventoryError(f"{where}: missing key {key!r}")
    value = data[key]
    if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
        raise InventoryError(f"{where}.{key}: expected {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


def _int_list(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise InventoryError(f"{where}: expected a list of integers, got {value!r}")
    return tuple(value)


def instance_from_dict(data: Mapping[str, Any]) -> InstanceIdentity:
    names = InstanceIdentity.__dataclass_fields__
    return InstanceIdentity(**{k: _take(data, k, str, "instance") for k in names})


def hardware_from_dict(data: Mapping[str, Any]) -> HardwareInfo:
    fields = HardwareInfo.__dataclass_fields__
    return HardwareInfo(**{k: _take(data, k, str if f.type == "str" else int, "hardware") for k, f in fields.items()})


def device_from_dict(data: Mapping[str, Any]) -> Device:
    where = "device"
    connected = data.get("connected_to") if isinstance(data, Mapping) else None
    return Device(
        index=_take(data, "index", int, where),
        nc_count=_take(data, "nc_count", int, where),
        neuroncore_ids=_int_list(_take(data, "neuroncore_ids", list, where), f"{where}.neuroncore_ids"),
        memory_size=_take(data, "memory_size", int, where),
        connected_to=None if connected is None else _int_list(connected, f"{where}.connected_to"),
        bdf=_take(data, "bdf", str, where),
        cpu_affinity=_take(data, "cpu_affinity", str, where),
        numa_node=_take(data, "numa_node", int, where),
    )


def pod_from_dict(data: Any, where: str = "pod") -> PodRef | None:
    """A process's ``pod`` (null: none)."""
    if data is None:
        return None
    names = PodRef.__dataclass_fields__
    return PodRef(**{k: _take(data, k, str, where) for k in names})


def process_from_dict(data: Mapping[str, Any]) -> NeuronProcess:
    where = "process"
    kind = _take(data, "kind", str, where)
    if kind not in PROCESS_KINDS:
        raise InventoryError(f"{where}.kind: expected one of {PROCESS_KINDS}, got {kind!r}")
    return NeuronProcess(
        pid=_take(data, "pid", int, where),
        command=_take(data, "command", str, where),
        tag=_take(data, "tag", str, where),
        runtime_version=_take(data, "runtime_version", str, where),
        kind=kind,
        neuroncores=_int_list(_take(data, "neuroncores", list, where), f"{where}.neuroncores"),
        attached_at=float(_take(data, "attached_at", (int, float), where)),
        pod=pod_from_dict(_take(data, "pod", (Mapping, type(None)), where), f"{where}.pod"),
    )


def inventory_from_dict(data: Mapping[str, Any]) -> Inventory:
    if not isinstance(data, Mapping):
        raise InventoryError(f"inventory: expected an object, got {type(data).__name__}")
    devices = _take(data, "devices", list, "inventory")
    processes = _take(data, "processes", list, "inventory")
    return Inventory(
        instance=instance_from_dict(_take(data, "instance", Mapping, "inventory")),
        hardware=hardware_from_dict(_take(data, "hardware", Mapping, "inventory")),
        devices=tuple(device_from_dict(d) for d in devices),
        processes=tuple(process_from_dict(p) for p in processes),
    )
