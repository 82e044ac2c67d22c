"""Build the ``neurontools.contract.inventory.Inventory`` of an emulated instance from the catalog."""

from __future__ import annotations

from emulator.hardware.instance_types import InstanceType, get_instance_type
from neurontools.contract.inventory import Device, HardwareInfo, InstanceIdentity, Inventory

# neuron_hardware_info's strings: the device identity's fields of the same names
_IDENTITY_FIELDS = ("neuron_device_type", "neuron_device_version", "neuroncore_version", "logical_neuroncore_config")


def hardware_info(itype: InstanceType) -> HardwareInfo:
    return HardwareInfo(
        neuron_device_count=itype.device_count,
        neuron_device_memory_size=itype.device_memory_bytes,
        neuroncore_per_device_count=itype.cores_per_device,
        **{name: getattr(itype.device_identity, name) for name in _IDENTITY_FIELDS},
    )


def devices(itype: InstanceType) -> tuple[Device, ...]:
    return tuple(
        Device(
            index=slot.index,
            nc_count=itype.cores_per_device,
            neuroncore_ids=itype.core_ids(slot.index),
            memory_size=itype.device_memory_bytes,
            connected_to=itype.connected_to(slot.index),
            bdf=slot.bdf,
            cpu_affinity=slot.cpu_affinity,
            numa_node=slot.numa_node,
        )
        for slot in itype.slots
    )


def build_inventory(instance_type: str | InstanceType, identity: InstanceIdentity) -> Inventory:
    """Inventory of an idle emulated host (no processes).

    ``instance_type`` is a name of :data:`INSTANCE_TYPES` or an :class:`InstanceType` (e.g. one
    with another PCI layout); it must match ``identity.instance_type``.
    """
    itype = instance_type if isinstance(instance_type, InstanceType) else get_instance_type(instance_type)
    if identity.instance_type != itype.name:
        raise ValueError(f"identity is for instance type {identity.instance_type!r}, not {itype.name!r}")
    return Inventory(instance=identity, hardware=hardware_info(itype), devices=devices(itype))
