"""Hardware catalog of the emulated Trn1 instance: chip figures, instance types, identity.

Every physical figure is a :class:`Sourced` (value, unit, source, note). Stdlib only.
"""

from emulator.hardware.identity import device_serial_number, make_identity, region_abbreviation
from emulator.hardware.instance_types import (
    BDF_LAYOUTS,
    DEFAULT_BDF_LAYOUT,
    INSTANCE_TYPES,
    TRAINIUM1_IDENTITY,
    TRN1_2XLARGE,
    TRN1_32XLARGE,
    TRN1N_32XLARGE,
    DeviceIdentity,
    DeviceSlot,
    InstanceType,
    get_instance_type,
    torus_neighbours,
)
from emulator.hardware.inventory import build_inventory
from emulator.hardware.neuroncore_v2 import (
    NCCOM_CALIBRATION,
    NEURONCORE_V2,
    RUNTIME,
    TRAINIUM1,
    CollectiveCalibration,
    NeuronCoreV2Spec,
    TrainiumChipSpec,
)
from emulator.hardware.sourced import SOURCES, Sourced, cite, iter_sourced

__all__ = [
    "BDF_LAYOUTS",
    "DEFAULT_BDF_LAYOUT",
    "INSTANCE_TYPES",
    "NCCOM_CALIBRATION",
    "NEURONCORE_V2",
    "RUNTIME",
    "SOURCES",
    "TRAINIUM1",
    "TRAINIUM1_IDENTITY",
    "TRN1N_32XLARGE",
    "TRN1_2XLARGE",
    "TRN1_32XLARGE",
    "CollectiveCalibration",
    "DeviceIdentity",
    "DeviceSlot",
    "InstanceType",
    "NeuronCoreV2Spec",
    "Sourced",
    "TrainiumChipSpec",
    "build_inventory",
    "cite",
    "device_serial_number",
    "get_instance_type",
    "iter_sourced",
    "make_identity",
    "region_abbreviation",
    "torus_neighbours",
]
