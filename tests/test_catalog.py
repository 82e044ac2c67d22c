"""Hardware catalog: instance types, torus, PCI/NUMA tables, identity, inventory, provenance."""

from __future__ import annotations

import dataclasses
import re

import pytest

from emulator.hardware import (
    BDF_LAYOUTS,
    INSTANCE_TYPES,
    NCCOM_CALIBRATION,
    NEURONCORE_V2,
    RUNTIME,
    TRAINIUM1,
    TRN1_2XLARGE,
    TRN1_32XLARGE,
    TRN1N_32XLARGE,
    Sourced,
    build_inventory,
    cite,
    device_serial_number,
    get_instance_type,
    iter_sourced,
    make_identity,
    region_abbreviation,
    torus_neighbours,
)
from emulator.hardware.sourced import SOURCES
from neurontools.contract.inventory import inventory_from_dict

# docs/reference/trn1-platform.md §Torus, literal CONNECTED lists
SPEC_TORUS = {
    0: [12, 3, 4, 1], 1: [13, 0, 5, 2], 2: [14, 1, 6, 3], 3: [15, 2, 7, 0],
    4: [0, 7, 8, 5], 5: [1, 4, 9, 6], 6: [2, 5, 10, 7], 7: [3, 6, 11, 4],
    8: [4, 11, 12, 9], 9: [5, 8, 13, 10], 10: [6, 9, 14, 11], 11: [7, 10, 15, 8],
    12: [8, 15, 0, 13], 13: [9, 12, 1, 14], 14: [10, 13, 2, 15], 15: [11, 14, 3, 12],
}  # fmt: skip

# docs/reference/trn1-platform.md §PCI, NUMA and CPU affinity, HyperPod capture: dev -> (BDF, NUMA, affinity)
N0, N1 = "0-31,64-95", "32-63,96-127"
SPEC_HYPERPOD = {
    0: ("0000:10:1b.0", 0, N0), 1: ("0000:10:1e.0", 0, N0), 2: ("0000:a0:1b.0", 1, N1),
    3: ("0000:a0:1e.0", 1, N1), 4: ("0000:20:1e.0", 0, N0), 5: ("0000:20:1c.0", 0, N0),
    6: ("0000:90:1e.0", 1, N1), 7: ("0000:90:1c.0", 1, N1), 8: ("0000:20:1d.0", 0, N0),
    9: ("0000:20:1b.0", 0, N0), 10: ("0000:90:1d.0", 1, N1), 11: ("0000:90:1b.0", 1, N1),
    12: ("0000:10:1c.0", 0, N0), 13: ("0000:10:1d.0", 0, N0), 14: ("0000:a0:1c.0", 1, N1),
    15: ("0000:a0:1d.0", 1, N1),
}  # fmt: skip

# same section, the Neuron docs layout (A10 table), for the alternative layout
SPEC_NEURON_DOCS = {
    0: ("0000:10:1c.0", 0, N0), 1: ("0000:10:1d.0", 0, N0), 2: ("0000:a0:1c.0", 1, N1),
    3: ("0000:a0:1d.0", 1, N1), 4: ("0000:20:1b.0", 0, N0), 5: ("0000:20:1c.0", 0, N0),
    6: ("0000:90:1b.0", 1, N1), 7: ("0000:90:1c.0", 1, N1), 8: ("0000:20:1d.0", 0, N0),
    9: ("0000:20:1e.0", 0, N0), 10: ("0000:90:1d.0", 1, N1), 11: ("0000:90:1e.0", 1, N1),
    12: ("0000:10:1e.0", 0, N0), 13: ("0000:10:1b.0", 0, N0), 14: ("0000:a0:1e.0", 1, N1),
    15: ("0000:a0:1b.0", 1, N1),
}  # fmt: skip


# --- instance types -------------------------------------------------------------------------


def test_instance_type_names_and_lookup():
    assert list(INSTANCE_TYPES) == ["trn1.2xlarge", "trn1.32xlarge", "trn1n.32xlarge"]
    assert get_instance_type("trn1.32xlarge") is TRN1_32XLARGE
    with pytest.raises(ValueError, match=r"unknown instance type 'trn2.48xlarge'.*trn1\.2xlarge.*trn1n\.32xlarge"):
        get_instance_type("trn2.48xlarge")


@pytest.mark.parametrize("d", range(16))
def test_torus_matches_spec_lists(d):
    assert list(torus_neighbours(d)) == SPEC_TORUS[d]
    assert list(TRN1_32XLARGE.connected_to(d)) == SPEC_TORUS[d]
    assert list(TRN1N_32XLARGE.connected_to(d)) == SPEC_TORUS[d]


def test_torus_is_symmetric_with_four_distinct_neighbours():
    for d in range(16):
        ns = torus_neighbours(d)
        assert len(set(ns)) == 4 and d not in ns
        assert all(d in torus_neighbours(n) for n in ns)


def test_single_device_has_no_links():
    assert TRN1_2XLARGE.connected_to(0) is None
    assert TRN1_2XLARGE.neuronlink_per_chip is None
    with pytest.raises(ValueError, match="device 1 out of range"):
        TRN1_2XLARGE.connected_to(1)


def test_core_ids():
    assert TRN1_2XLARGE.core_count == 2 and TRN1_2XLARGE.core_ids(0) == (0, 1)
    assert TRN1_32XLARGE.core_count == 32
    for d in range(16):
        assert TRN1_32XLARGE.core_ids(d) == (2 * d, 2 * d + 1)
    assert [TRN1_32XLARGE.device_of_core(c) for c in (0, 1, 2, 30, 31)] == [0, 0, 1, 15, 15]
    with pytest.raises(ValueError, match="NeuronCore 32 out of range 0-31"):
        TRN1_32XLARGE.device_of_core(32)


@pytest.mark.parametrize("d", range(16))
def test_trn1_32xlarge_pci_numa_affinity(d):
    slot = TRN1_32XLARGE.slots[d]
    assert (slot.bdf, slot.numa_node, slot.cpu_affinity) == SPEC_HYPERPOD[d]


def test_neuron_docs_layout():
    alt = TRN1_32XLARGE.with_bdf_layout("neuron-docs")
    assert {s.index: (s.bdf, s.numa_node, s.cpu_affinity) for s in alt.slots} == SPEC_NEURON_DOCS
    assert alt.name == "trn1.32xlarge" and BDF_LAYOUTS["hyperpod"] == tuple(v[0] for v in SPEC_HYPERPOD.values())
    with pytest.raises(ValueError, match="unknown PCI layout 'x'; valid: hyperpod, neuron-docs"):
        TRN1_32XLARGE.with_bdf_layout("x")
    with pytest.raises(ValueError, match="only the 16-device types"):
        TRN1_2XLARGE.with_bdf_layout("hyperpod")


def test_trn1_2xlarge_device():
    (slot,) = TRN1_2XLARGE.slots
    assert (slot.bdf, slot.numa_node, slot.cpu_affinity) == ("0000:00:1e.0", -1, "0-7")
    assert TRN1_2XLARGE.lspci_line(0) == "00:1e.0 System peripheral: Amazon.com, Inc. NeuronDevice (Trainium)"
    assert TRN1_2XLARGE.numa_nodes == ()
    assert TRN1_2XLARGE.efa_devices == 0 and TRN1_2XLARGE.efa_bandwidth is None


def test_host_and_memory_facts():
    for t in INSTANCE_TYPES.values():
        assert t.device_memory_bytes == 34359738368
        assert t.core_memory_bytes == 16 * 2**30
        assert t.cores_per_device == 2
    assert (TRN1_2XLARGE.vcpus.value, TRN1_2XLARGE.host_memory.value) == (8, 32)
    assert (TRN1_32XLARGE.vcpus.value, TRN1_32XLARGE.host_memory.value) == (128, 512)
    assert TRN1_32XLARGE.numa_nodes == ((0, N0), (1, N1))
    assert (TRN1_32XLARGE.efa_devices, TRN1_32XLARGE.efa_bandwidth.value) == (8, 800)
    assert (TRN1N_32XLARGE.efa_devices, TRN1N_32XLARGE.efa_bandwidth.value) == (16, 1600)
    assert TRN1_32XLARGE.neuronlink_per_chip.value == 384 and TRN1N_32XLARGE.neuronlink_per_chip.value == 768


def test_identity_strings():
    ident = TRN1_32XLARGE.device_identity
    assert (ident.neuron_device_type, ident.neuron_device_version, ident.neuroncore_version) == (
        "trainium",
        "v2",
        "v2",
    )
    assert ident.logical_neuroncore_config == 1
    assert (ident.sysfs_device_arch_type, ident.sysfs_core_arch_type) == ("NDv2", "NCv2")
    assert (ident.sysfs_instance_type, ident.sysfs_device_name) == ("Trn1", "Trainium1")


def test_trn1n_equals_trn1_32xlarge_except_network():
    differing = {"name", "efa_devices", "efa_bandwidth", "network_bandwidth", "neuronlink_per_chip"}
    for f in dataclasses.fields(TRN1_32XLARGE):
        same = getattr(TRN1_32XLARGE, f.name) == getattr(TRN1N_32XLARGE, f.name)
        assert same != (f.name in differing), f.name


# --- chip figures ---------------------------------------------------------------------------


def test_core_figures():
    t = NEURONCORE_V2.tensor
    assert [t.peak(d).value for d in ("bf16", "torch.float16", "tf32", "fp8", "fp32", "int8")] == [
        95,
        95,
        95,
        95,
        23.75,
        190,
    ]
    assert t.peak_bf16_nki.value == pytest.approx(
        t.array_rows.value * t.array_cols.value * 2 * t.clock.base / 1e12, rel=1e-3
    )
    with pytest.raises(ValueError, match="no TensorE peak for dtype 'int4'"):
        t.peak("int4")
    assert NEURONCORE_V2.hbm.base == 16 * 2**30 and TRAINIUM1.hbm.base == 32 * 2**30
    assert NEURONCORE_V2.hbm_bandwidth.value * 2 == TRAINIUM1.hbm_bandwidth.value == 820
    assert NEURONCORE_V2.on_chip.sbuf.base == 24 * 2**20 and NEURONCORE_V2.on_chip.psum.base == 2 * 2**20
    assert NEURONCORE_V2.dma.engines_per_nc.value * 2 == TRAINIUM1.dma_engines.value
    assert TRAINIUM1.links.neuronlink_per_link.value * TRAINIUM1.links.neuronlink_ports.value == 384
    assert "27 GiB/s" in NEURONCORE_V2.dma.engine_peak.note  # the conflict is recorded
    assert RUNTIME.exec_timeout.base == 30


def test_unit_conversion():
    assert Sourced(800, "Gbps", "x").base == 100e9
    assert Sourced(1.3, "us", "x").base == pytest.approx(1.3e-6)
    with pytest.raises(ValueError, match="unknown unit"):
        Sourced(1, "furlongs", "x")
    with pytest.raises(ValueError, match="source must not be empty"):
        Sourced(1, "s", " ")


def test_every_figure_is_sourced():
    roots = [TRAINIUM1, RUNTIME, *INSTANCE_TYPES.values()]
    figures = [fig for root in roots for fig in iter_sourced(root)]
    assert len(figures) > 60
    for path, fig in figures:
        ids = re.findall(r"\[([A-Z0-9-]+)\]", fig.source)
        assert ids and all(i in SOURCES for i in ids), (path, fig.source)
    for cal in NCCOM_CALIBRATION:
        assert cal.source.startswith("[A21]")
    with pytest.raises(ValueError, match="unknown source id"):
        cite("Z9")


# printed busbw of nccom-test (docs/reference/trn1-runtime.md §nccom-test points); checks the points' transcription
PRINTED_BUSBW = {
    "all-reduce 2 ranks fp32": {2**20: 14.4, 4 * 2**20: 36.5, 16 * 2**20: 47.1, 2**30: 52.8},
    "all-reduce 64 ranks (2 nodes, EFA) fp32": {
        2**20: 1.45,
        64 * 2**20: 31.1,
        512 * 2**20: 45.2,
        2**30: 47.1,
    },
    "all-gather 32 ranks (1 node) fp32": {64 * 2**10: 0.39, 512 * 2**10: 2.64},
    "all-reduce 2 ranks uint8": {32 * 2**20: 40.7},
}


@pytest.mark.parametrize("cal", NCCOM_CALIBRATION, ids=lambda c: c.name)
def test_nccom_calibration_points(cal):
    sizes = [size for size, _ in cal.points]
    assert sizes == sorted(sizes)
    busbw = dict(zip(sizes, cal.busbw_gib_s(), strict=True))
    for size, printed in PRINTED_BUSBW[cal.name].items():
        assert busbw[size] == pytest.approx(printed, abs=0.06), size


# --- identity -------------------------------------------------------------------------------


def test_identity_stable_and_well_formed():
    a = make_identity("trn1.32xlarge", seed="node-1")
    assert a == make_identity("trn1.32xlarge", seed="node-1")
    b = make_identity("trn1.32xlarge", seed="node-2")
    assert (a.instance_id, a.ami_id, a.subnet_id) != (b.instance_id, b.ami_id, b.subnet_id)
    for ident in (a, b):
        assert re.fullmatch(r"i-0[0-9a-f]{16}", ident.instance_id)
        assert re.fullmatch(r"ami-[0-9a-f]{17}", ident.ami_id)
        assert re.fullmatch(r"subnet-[0-9a-f]{17}", ident.subnet_id)
        assert (ident.instance_region, ident.instance_availability_zone) == ("us-west-2", "us-west-2d")
        assert ident.instance_availability_zone_id == "usw2-az4"
        assert ident.instance_name == "" and ident.instance_type == "trn1.32xlarge"


def test_identity_overrides():
    ident = make_identity(
        "trn1.2xlarge",
        seed="s",
        instance_id="i-0bea223b1afb7e159",
        ami_id="ami-12345678",
        subnet_id="subnet-0123456789abcdef0",
        instance_name="trainer",
    )
    assert (ident.instance_id, ident.ami_id, ident.subnet_id) == (
        "i-0bea223b1afb7e159",
        "ami-12345678",
        "subnet-0123456789abcdef0",
    )
    assert ident.instance_name == "trainer"
    assert make_identity("trn1.2xlarge", seed="s", instance_id="i-1234abcd").instance_id == "i-1234abcd"
    east = make_identity("trn1.2xlarge", seed="s", availability_zone="us-east-1b")
    assert (east.instance_region, east.instance_availability_zone_id) == ("us-east-1", "use1-az2")
    only_region = make_identity("trn1.2xlarge", seed="s", region="us-east-1")
    assert only_region.instance_availability_zone == "us-east-1a"
    full = make_identity(
        "trn1.2xlarge",
        seed="s",
        region="us-east-1",
        availability_zone="us-east-1c",
        availability_zone_id="use1-az6",
    )
    assert full.instance_availability_zone_id == "use1-az6"
    assert region_abbreviation("ap-southeast-2") == "apse2"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"instance_id": "i-0BEA223B1AFB7E159"}, "invalid instance id"),
        ({"instance_id": "i-0bea223b1afb7e15"}, "invalid instance id"),
        ({"instance_id": "0bea223b1afb7e159"}, "invalid instance id"),
        ({"ami_id": "ami-123"}, "invalid AMI id"),
        ({"subnet_id": "sub-12345678"}, "invalid subnet id"),
        ({"region": "uswest2"}, "invalid region"),
        ({"availability_zone": "us-west-2"}, "invalid availability zone"),
        ({"region": "us-east-1", "availability_zone": "us-west-2d"}, "is not in region 'us-east-1'"),
        ({"availability_zone_id": "az4"}, "invalid availability zone id"),
        ({"availability_zone_id": "use1-az4"}, "does not belong to region 'us-west-2'"),
        ({"seed": 3}, "seed must be a string"),
    ],
)
def test_identity_invalid_overrides(kwargs, message):
    kwargs.setdefault("seed", "s")
    with pytest.raises(ValueError, match=message):
        make_identity("trn1.2xlarge", **kwargs)


def test_identity_unknown_instance_type():
    with pytest.raises(ValueError, match=r"unknown instance type 'p4d\.24xlarge'"):
        make_identity("p4d.24xlarge", seed="s")


def test_device_serial_number():
    assert re.fullmatch(r"[0-9a-f]{16}", device_serial_number("s", 0))
    assert device_serial_number("s", 0) == device_serial_number("s", 0) != device_serial_number("s", 1)


# --- inventory ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(INSTANCE_TYPES))
def test_build_inventory_round_trips(name):
    inv = build_inventory(name, make_identity(name, seed="rt"))
    assert inventory_from_dict(inv.to_dict()) == inv
    assert inv.processes == ()
    hw = inv.hardware.to_dict()
    assert hw == {
        "neuron_device_type": "trainium",
        "neuron_device_version": "v2",
        "neuroncore_version": "v2",
        "neuron_device_count": INSTANCE_TYPES[name].device_count,
        "neuron_device_memory_size": 34359738368,
        "neuroncore_per_device_count": 2,
        "logical_neuroncore_config": 1,
    }
    ids = [c for d in inv.devices for c in d.neuroncore_ids]
    assert ids == list(range(INSTANCE_TYPES[name].core_count))


def test_build_inventory_devices_match_spec():
    inv = build_inventory("trn1.32xlarge", make_identity("trn1.32xlarge", seed="x"))
    for dev in inv.devices:
        assert list(dev.connected_to) == SPEC_TORUS[dev.index]
        assert (dev.bdf, dev.numa_node, dev.cpu_affinity) == SPEC_HYPERPOD[dev.index]
    small = build_inventory("trn1.2xlarge", make_identity("trn1.2xlarge", seed="x"))
    assert small.devices[0].to_dict() == {
        "index": 0,
        "nc_count": 2,
        "neuroncore_ids": [0, 1],
        "memory_size": 34359738368,
        "connected_to": None,
        "bdf": "0000:00:1e.0",
        "cpu_affinity": "0-7",
        "numa_node": -1,
    }
    alt = build_inventory(TRN1_32XLARGE.with_bdf_layout("neuron-docs"), make_identity("trn1.32xlarge", seed="x"))
    assert alt.devices[0].bdf == "0000:10:1c.0"


def test_build_inventory_rejects_mismatched_identity():
    with pytest.raises(ValueError, match=r"identity is for instance type 'trn1\.2xlarge', not 'trn1\.32xlarge'"):
        build_inventory("trn1.32xlarge", make_identity("trn1.2xlarge", seed="x"))
