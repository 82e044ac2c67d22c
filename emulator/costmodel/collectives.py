"""The calibrated links of collectives: NeuronLink inside an instance, EFA across instances.

Every collective is costed by :func:`~emulator.costmodel.topology.cost_group_collective` on the
concrete NeuronCores of its replica group (docs/collectives.md); this module holds what that
model is built from: the collective kinds, their ring steps and bytes factor, and the
latency-bandwidth parameters (:class:`CollectiveLinks`) derived from the catalog's nccom-test series.

Ring algorithms (latency-bandwidth model)::

    seconds = L + f * B / bw
    all-reduce           f = 2(n-1)/n, ring steps s = 2(n-1)
    all-gather / reduce-scatter / all-to-all   f = (n-1)/n, s = n-1
    broadcast            f = 1 (pipelined chain), s = n-1

``B`` is the buffer as nccom-test sizes it (all-reduce: the reduced buffer; all-gather: the
gathered output; reduce-scatter: the input). Inside one instance::

    L = L_2 + (s - 2) * h_intra         L_2 = 58 us, the measured 2-rank small-message floor
    bw = intra bus bandwidth            from the 2-rank 1 GiB point: 2(n-1)/n * B / (t - L_2)

Across ``N`` instances (EFA)::

    L = L_64 + (s - 126) * h_intra + 2 (N - 2) * h_inter      L_64: measured 64-rank / 2-node plateau
    bw = min(intra bw, inter bus bandwidth)                    from the 64-rank 1 GiB point likewise

Latency floors are "the largest time measured for messages <= 64 KiB" of a series (the 2-rank
series is flat at 58 us there; the 64-rank series reaches its ~1.3 ms ring plateau at 64 KiB).
Hop latencies: intra-node the high end of "~1-2 us" (HBM is loaded during training), inter-node
15 us [A20]. Other instance types scale the inter-node bus bandwidth by their network bandwidth
relative to trn1.32xlarge's 800 Gbps, capped by the intra-node figure (an extrapolation).
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.hardware.instance_types import TRN1_32XLARGE, InstanceType
from emulator.hardware.neuroncore_v2 import (
    ALLREDUCE_2RANK_FP32,
    ALLREDUCE_64RANK_FP32,
    TRAINIUM1,
    CollectiveCalibration,
)

_SMALL_MESSAGE = 64 * 2**10
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send")
_ALIASES = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "p2p": "send",
    "send_recv": "send",
}


@dataclass(frozen=True)
class CollectiveLinks:
    """Collective parameters of one instance type (all in seconds, bytes/s)."""

    name: str
    intra_floor: float  # L_2
    intra_floor_steps: int  # ring steps of the series the floor comes from
    intra_bandwidth: float
    intra_hop: float
    inter_floor: float  # L_64
    inter_floor_steps: int
    inter_floor_nodes: int
    inter_bandwidth: float
    inter_hop: float


def collective_kind(kind: str) -> str:
    """The canonical name of a collective kind (``all-reduce``, ``allreduce`` -> ``all_reduce``)."""
    key = kind.lower().replace("-", "_").replace(" ", "_") if isinstance(kind, str) else ""
    key = _ALIASES.get(key, key)
    if key not in KINDS:
        raise ValueError(f"unknown collective {kind!r}; known: {', '.join(KINDS)}")
    return key


def steps_and_factor(kind: str, ranks: int) -> tuple[int, float]:
    """Ring steps and bytes factor of a collective kind (``all_reduce``, ``all-gather`` ...);
    a ``send`` is one step carrying the message once."""
    key = collective_kind(kind)
    n = ranks
    if key == "all_reduce":
        return 2 * (n - 1), 2 * (n - 1) / n
    if key == "send":
        return 1, 1.0
    if key == "broadcast":
        return n - 1, 1.0
    return n - 1, (n - 1) / n


def latency_floor(series: CollectiveCalibration) -> float:
    """Largest measured time (s) among messages <= 64 KiB: the small-message plateau of a series."""
    return max(us for size, us in series.points if size <= _SMALL_MESSAGE) * 1e-6


def bus_bandwidth(series: CollectiveCalibration) -> float:
    """Bytes/s of the ring from a series' largest message after its latency floor is removed."""
    size, us = max(series.points)
    _, factor = steps_and_factor(series.collective, series.ranks)
    return factor * size / (us * 1e-6 - latency_floor(series))


def efa_bandwidth(instance: InstanceType) -> float:
    """Bytes/s one instance sends (and receives) over its network: 800 Gbps = 100 GB/s on trn1.32xlarge."""
    return (instance.efa_bandwidth or instance.network_bandwidth).base


def links_for(instance: InstanceType) -> CollectiveLinks:
    """Collective parameters of an instance type, derived from the catalog's nccom-test series."""
    intra_bw = bus_bandwidth(ALLREDUCE_2RANK_FP32)
    inter_bw = bus_bandwidth(ALLREDUCE_64RANK_FP32)
    inter_bw *= efa_bandwidth(instance) / efa_bandwidth(TRN1_32XLARGE)
    links = TRAINIUM1.links
    return CollectiveLinks(
        name=instance.name,
        intra_floor=latency_floor(ALLREDUCE_2RANK_FP32),
        intra_floor_steps=steps_and_factor("all_reduce", ALLREDUCE_2RANK_FP32.ranks)[0],
        intra_bandwidth=intra_bw,
        intra_hop=links.intra_node_hop_latency_high.base,
        inter_floor=latency_floor(ALLREDUCE_64RANK_FP32),
        inter_floor_steps=steps_and_factor("all_reduce", ALLREDUCE_64RANK_FP32.ranks)[0],
        inter_floor_nodes=ALLREDUCE_64RANK_FP32.nodes,
        inter_bandwidth=min(inter_bw, intra_bw),
        inter_hop=links.inter_node_hop_latency.base,
    )
