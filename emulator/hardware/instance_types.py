"""Trn1 instance types: device layout, host wiring (PCI, NUMA, CPU affinity), identity strings.

Facts from docs/reference/trn1-platform.md (figures: docs/hardware-catalog.md). The default PCI
layout of the 32xlarge types is the real HyperPod capture shown by the reference ``neuron-ls``
output (docs/reference/trn1-platform.md §PCI, NUMA and CPU affinity); the layout of the
Neuron docs (A10/A11) is available as an alternative. trn1n.32xlarge is assumed to be wired like
trn1.32xlarge (not documented).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType

from emulator.hardware.neuroncore_v2 import TRAINIUM1, TrainiumChipSpec
from emulator.hardware.sourced import Sourced, cite
from neurontools.contract.inventory import CoreLayout

TORUS_ROWS = 4
TORUS_COLS = 4

_BDF_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


@dataclass(frozen=True)
class DeviceIdentity:
    """Strings a Trainium device reports through the driver and the tools."""

    neuron_device_type: str = "trainium"  # neuron-monitor neuron_hardware_info
    neuron_device_version: str = "v2"
    neuroncore_version: str = "v2"
    logical_neuroncore_config: int = 1
    sysfs_device_arch_type: str = "NDv2"  # neuron<d>/info/architecture/arch_type
    sysfs_core_arch_type: str = "NCv2"  # neuron<d>/neuron_core<n>/info/architecture/arch_type
    sysfs_instance_type: str = "Trn1"  # neuron<d>/info/architecture/instance_type
    sysfs_device_name: str = "Trainium1"  # neuron<d>/info/architecture/device_name
    lspci_description: str = "System peripheral: Amazon.com, Inc. NeuronDevice (Trainium)"
    char_device_prefix: str = "/dev/neuron"
    char_device_major: int = 243  # observed on a trn1.2xlarge (NT-O)
    driver_version: str = "2.26.5.0"  # /sys/module/neuron/version of the real captures


TRAINIUM1_IDENTITY = DeviceIdentity()


@dataclass(frozen=True)
class DeviceSlot:
    """Where one device sits on the host."""

    index: int
    bdf: str  # full form 0000:bb:dd.f
    numa_node: int  # -1 without NUMA
    cpu_affinity: str  # Linux cpulist

    def __post_init__(self) -> None:
        if not _BDF_RE.match(self.bdf):
            raise ValueError(f"device {self.index}: BDF {self.bdf!r} is not of the form 0000:bb:dd.f")

    @property
    def short_bdf(self) -> str:
        return self.bdf.split(":", 1)[1]


@dataclass(frozen=True)
class InstanceType:
    name: str
    device_count: int
    cores_per_device: int
    chip: TrainiumChipSpec
    device_identity: DeviceIdentity
    slots: tuple[DeviceSlot, ...]
    vcpus: Sourced
    host_memory: Sourced
    host_memory_total_bytes: int  # MemTotal seen on real instances (neuron-monitor memory_total_bytes)
    numa_nodes: tuple[tuple[int, str], ...]  # (node, cpulist); empty when the host reports no NUMA
    torus: bool  # 4x4 NeuronLink-v2 torus between the devices
    neuronlink_per_chip: Sourced | None
    efa_devices: int
    efa_bandwidth: Sourced | None
    network_bandwidth: Sourced
    local_nvme: Sourced
    local_nvme_disks: int

    def __post_init__(self) -> None:
        if len(self.slots) != self.device_count:
            raise ValueError(f"{self.name}: {len(self.slots)} device slots for {self.device_count} devices")
        if [s.index for s in self.slots] != list(range(self.device_count)):
            raise ValueError(f"{self.name}: device slots must be numbered 0..{self.device_count - 1}")
        if self.torus and self.device_count != TORUS_ROWS * TORUS_COLS:
            raise ValueError(f"{self.name}: a torus needs {TORUS_ROWS * TORUS_COLS} devices")

    @cached_property
    def layout(self) -> CoreLayout:
        """The core/device arithmetic (neurontools/contract/inventory.py, the tools' too)."""
        return CoreLayout(self.device_count, self.cores_per_device)

    @property
    def core_count(self) -> int:
        return self.layout.core_count

    @property
    def device_memory_bytes(self) -> int:
        return int(self.chip.hbm.base)

    @property
    def core_memory_bytes(self) -> int:
        return int(self.chip.core.hbm.base)

    def core_ids(self, device: int) -> tuple[int, ...]:
        self._check_device(device)
        return tuple(self.layout.cores_of(device))

    def device_of_core(self, core: int) -> int:
        if not 0 <= core < self.core_count:
            raise ValueError(f"{self.name}: NeuronCore {core} out of range 0-{self.core_count - 1}")
        return self.layout.device_of(core)

    def connected_to(self, device: int) -> tuple[int, ...] | None:
        """NeuronLink neighbours in neuron-ls order (up, left, down, right); None without links."""
        self._check_device(device)
        return torus_neighbours(device) if self.torus else None

    def lspci_line(self, device: int) -> str:
        self._check_device(device)
        return f"{self.slots[device].short_bdf} {self.device_identity.lspci_description}"

    def with_bdf_layout(self, layout: str) -> InstanceType:
        """This type with another PCI layout of :data:`BDF_LAYOUTS` (NUMA and affinity follow the bus)."""
        if self.device_count != 16:
            raise ValueError(f"{self.name}: only the 16-device types have alternative PCI layouts")
        if layout not in BDF_LAYOUTS:
            raise ValueError(f"unknown PCI layout {layout!r}; valid: {', '.join(BDF_LAYOUTS)}")
        return dataclasses.replace(self, slots=_slots_32xl(BDF_LAYOUTS[layout]))

    def _check_device(self, device: int) -> None:
        if not 0 <= device < self.device_count:
            raise ValueError(f"{self.name}: device {device} out of range 0-{self.device_count - 1}")


def torus_neighbours(device: int, rows: int = TORUS_ROWS, cols: int = TORUS_COLS) -> tuple[int, int, int, int]:
    """Neighbours of ``device`` on a wrap-around grid, up, left, down, right (docs/reference/trn1-platform.md
    §Torus)."""
    if not 0 <= device < rows * cols:
        raise ValueError(f"device {device} not on a {rows}x{cols} grid")
    r, c = divmod(device, cols)
    return (
        ((r - 1) % rows) * cols + c,
        r * cols + (c - 1) % cols,
        ((r + 1) % rows) * cols + c,
        r * cols + (c + 1) % cols,
    )


# PCI bus -> NUMA node on trn1.32xlarge: buses 0x10/0x20 on node 0, 0x90/0xa0 on node 1
# (docs/reference/trn1-platform.md §PCI, NUMA and CPU affinity).
_NUMA_CPUS = {0: "0-31,64-95", 1: "32-63,96-127"}
_BUS_NUMA = {"10": 0, "20": 0, "90": 1, "a0": 1}

BDF_LAYOUTS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        # real trn1.32xlarge, HyperPod capture 2026, tools >= 2.25 (docs/reference/trn1-platform.md), default
        "hyperpod": (
            "0000:10:1b.0",
            "0000:10:1e.0",
            "0000:a0:1b.0",
            "0000:a0:1e.0",
            "0000:20:1e.0",
            "0000:20:1c.0",
            "0000:90:1e.0",
            "0000:90:1c.0",
            "0000:20:1d.0",
            "0000:20:1b.0",
            "0000:90:1d.0",
            "0000:90:1b.0",
            "0000:10:1c.0",
            "0000:10:1d.0",
            "0000:a0:1c.0",
            "0000:a0:1d.0",
        ),
        # Neuron docs: runtime-performance-tips table [A10] and nrt-developer-guide --topology [A11]
        "neuron-docs": (
            "0000:10:1c.0",
            "0000:10:1d.0",
            "0000:a0:1c.0",
            "0000:a0:1d.0",
            "0000:20:1b.0",
            "0000:20:1c.0",
            "0000:90:1b.0",
            "0000:90:1c.0",
            "0000:20:1d.0",
            "0000:20:1e.0",
            "0000:90:1d.0",
            "0000:90:1e.0",
            "0000:10:1e.0",
            "0000:10:1b.0",
            "0000:a0:1e.0",
            "0000:a0:1b.0",
        ),
    }
)
DEFAULT_BDF_LAYOUT = "hyperpod"


def _slots_32xl(bdfs: tuple[str, ...]) -> tuple[DeviceSlot, ...]:
    slots = []
    for d, bdf in enumerate(bdfs):
        node = _BUS_NUMA[bdf[5:7]]
        slots.append(DeviceSlot(d, bdf, node, _NUMA_CPUS[node]))
    return tuple(slots)


def _trn1_32xl(name: str, *, efa_devices: int, efa: Sourced, neuronlink: Sourced) -> InstanceType:
    return InstanceType(
        name=name,
        device_count=16,
        cores_per_device=2,
        chip=TRAINIUM1,
        device_identity=TRAINIUM1_IDENTITY,
        slots=_slots_32xl(BDF_LAYOUTS[DEFAULT_BDF_LAYOUT]),
        vcpus=Sourced(128, "count", cite("A1", "S2")),
        host_memory=Sourced(512, "GiB", cite("A1", "S2")),
        host_memory_total_bytes=532523487232,
        numa_nodes=tuple(_NUMA_CPUS.items()),
        torus=True,
        neuronlink_per_chip=neuronlink,
        efa_devices=efa_devices,
        efa_bandwidth=efa,
        network_bandwidth=efa,
        local_nvme=Sourced(1900, "GB", cite("W1", "W2"), "per disk; S2 says 4 x 2 TB ('up to 8 TB')"),
        local_nvme_disks=4,
    )


TRN1_2XLARGE = InstanceType(
    name="trn1.2xlarge",
    device_count=1,
    cores_per_device=2,
    chip=TRAINIUM1,
    device_identity=TRAINIUM1_IDENTITY,
    slots=(DeviceSlot(0, "0000:00:1e.0", -1, "0-7"),),
    vcpus=Sourced(8, "count", cite("A1", "S2")),
    host_memory=Sourced(32, "GiB", cite("A1", "S2")),
    host_memory_total_bytes=33110204416,
    numa_nodes=(),
    torus=False,
    neuronlink_per_chip=None,
    efa_devices=0,
    efa_bandwidth=None,
    network_bandwidth=Sourced(
        12.5, "Gbps", cite("S2"), "'up to'; S3 says up to 10 Gbps; A1 EFA column 'up-to 25' is misaligned"
    ),
    local_nvme=Sourced(500, "GB", cite("S2"), "S2: 1 x 475-500 GB (docs/hardware-catalog.md §Conflicting figures)"),
    local_nvme_disks=1,
)

TRN1_32XLARGE = _trn1_32xl(
    "trn1.32xlarge",
    efa_devices=8,
    efa=Sourced(800, "Gbps", cite("A1", "A26", "S0"), "8 EFA devices"),
    neuronlink=TRAINIUM1.links.neuronlink_per_chip,
)

TRN1N_32XLARGE = _trn1_32xl(
    "trn1n.32xlarge",
    efa_devices=16,
    efa=Sourced(1600, "Gbps", cite("A1", "A26"), "16 EFA devices"),
    neuronlink=Sourced(768, "GB/s", cite("A1"), "A1 table (GiB/s); doubling over trn1 is unexplained"),
)

INSTANCE_TYPES: Mapping[str, InstanceType] = MappingProxyType(
    {t.name: t for t in (TRN1_2XLARGE, TRN1_32XLARGE, TRN1N_32XLARGE)}
)


def get_instance_type(name: str) -> InstanceType:
    try:
        return INSTANCE_TYPES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown instance type {name!r}; valid: {', '.join(INSTANCE_TYPES)}") from None
