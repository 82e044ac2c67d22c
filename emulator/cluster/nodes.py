"""The nodes of a cluster and their identities.

Every node is an instance of its own (its own instance id, derived from the host name, the
instance type and the node's socket path, as ``neuron-emulator up`` derives a single daemon's from
its address) and all nodes share what the instances of one UltraCluster share: region,
availability zone (and its id), AMI, subnet and a cluster placement group.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass

from emulator.cluster.layout import Layout
from emulator.hardware.identity import make_identity
from neurontools.contract.inventory import InstanceIdentity
from neurontools.sources.address import DaemonAddress

MIN_NODES = 1
MAX_NODES = 64
DEFAULT_INSTANCE_TYPE = "trn1.32xlarge"
DEFAULT_PLACEMENT_GROUP = "neuron-emulator-cluster"
# EC2 placement group names: up to 255 ASCII characters; here without spaces or quotes, so that
# the name is a plain Prometheus label value and a plain table cell
_PLACEMENT_GROUP_RE = re.compile(r"^[A-Za-z0-9._:-]{1,255}$")


@dataclass(frozen=True)
class Shared:
    """What every node of the cluster has in common."""

    instance_type: str
    region: str
    availability_zone: str
    availability_zone_id: str
    ami_id: str
    subnet_id: str
    placement_group: str


@dataclass(frozen=True)
class NodeSpec:
    index: int
    address: DaemonAddress
    identity: InstanceIdentity


def check_node_count(count: int) -> None:
    if not MIN_NODES <= count <= MAX_NODES:
        raise ValueError(f"--nodes {count}: expected {MIN_NODES} to {MAX_NODES}")


def shared_identity(
    instance_type: str,
    layout: Layout,
    *,
    placement_group: str = DEFAULT_PLACEMENT_GROUP,
    **location: str | None,
) -> Shared:
    """The cluster's common identity: ``location`` is ``make_identity``'s region,
    availability_zone, availability_zone_id, ami_id and subnet_id; unset ones are derived (stable
    for the host, type and runtime directory). Raises ``ValueError`` with the offending value."""
    if not _PLACEMENT_GROUP_RE.match(placement_group):
        raise ValueError(f"invalid placement group {placement_group[:60]!r}: expected 1-255 letters, digits or . _ : -")
    base = make_identity(
        instance_type,
        seed=f"{socket.gethostname()}|{instance_type}|{layout.node_dir}",
        instance_name="",  # each node has its own
        **location,
    )
    zone, zone_id = base.instance_availability_zone, base.instance_availability_zone_id
    return Shared(instance_type, base.instance_region, zone, zone_id, base.ami_id, base.subnet_id, placement_group)


def plan_nodes(shared: Shared, count: int, layout: Layout) -> list[NodeSpec]:
    """``count`` nodes, each on ``layout.node_socket(index)`` with an instance id of its own."""
    check_node_count(count)
    nodes = []
    for index in range(count):
        address = DaemonAddress(socket_path=layout.node_socket(index))
        identity = make_identity(
            shared.instance_type,
            seed=f"{socket.gethostname()}|{shared.instance_type}|{address}",
            instance_name=f"node-{index}",
            region=shared.region,
            availability_zone=shared.availability_zone,
            availability_zone_id=shared.availability_zone_id,
            ami_id=shared.ami_id,
            subnet_id=shared.subnet_id,
        )
        nodes.append(NodeSpec(index, address, identity))
    return nodes
