"""Every collective's cost: a replica group of concrete NeuronCores, on the instance's real links.

The one collective model (docs/collectives.md): a replayed plan's collectives (``emulator/parallel``),
a real gloo collective of a script under ``neuron-emulator exec`` (``emulator/compat``) and a
built-in workload's gradient all-reduce (``emulator/runtime/executor.py``) all come here with the
global NeuronCore ids of their group (:mod:`emulator.costmodel.torus` numbers them and orders the
ring), so the same collective on the same cores costs the same whatever launched it.

Model, per ring (the group's cores in :func:`~emulator.costmodel.torus.ring_order`)::

    ring edge        intra_chip (same chip) | neuronlink (torus route, dimension order) | efa (other node)
    latency          L(s, N) + extra * h_intra           extra = torus hops beyond 1 on the critical path
    L(s, 1)          max(L_2, L_2 + (s - 2) * h_intra)
    L(s, N >= 2)     max(L(s, 1), L_64 + (s - 126) * h_intra + 2 (N - 2) h_inter)
    bandwidth        max-min fair share: each ring at most bw_intra (one node) or bw_inter (several),
                     each directed NeuronLink at most 96 GB/s (trn1) summed over the ring edges routed
                     through it, each node's EFA egress / ingress at most the instance network bandwidth
    seconds          latency + f * B / bandwidth

``s``, ``f`` and the link parameters (``L_2``, ``L_64``, ``h``, ``bw``) are those of
:mod:`emulator.costmodel.collectives` (all-reduce ``2(n-1)``, ``2(n-1)/n``; all-gather,
reduce-scatter, all-to-all ``n-1``, ``(n-1)/n``; broadcast ``n-1``, 1). ``send`` is one message
from ``group[0]`` to ``group[1]``: latency ``L_2`` plus its extra torus hops (``+ h_inter`` when it
crosses nodes), bytes ``B``. A group of two cores of one chip reproduces the 2-rank nccom-test
series; a 64-core 2-node group the 64-rank one. Pure functions, torch-free.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

from emulator.costmodel.collectives import CollectiveLinks, collective_kind, efa_bandwidth, links_for, steps_and_factor
from emulator.costmodel.torus import (
    cached_ring_order,
    check_group,
    check_nodes,
    core_place,
    edge_list,
    nodes_needed,
    require_links,
    route_links,
)
from emulator.hardware.instance_types import InstanceType

LINK_TYPES = ("intra_chip", "neuronlink", "efa")


@dataclass(frozen=True)
class GroupCollectiveCost:
    """Cost of one collective of a replica group (the same for every member)."""

    seconds: float  # time of the collective for every member of the group
    link_bytes: Mapping[str, int]  # bytes a sending member puts on each link type (mean over senders)
    ring: tuple[int, ...]  # the ring order of the member cores used (send: (src, dst))
    hops: int  # longest chip-to-chip torus route between ring neighbours (0: no NeuronLink edge)
    bandwidth: float  # bytes/s the ring achieved (bus bandwidth; 0 for a one-core group)
    latency: float = 0.0  # the size-independent part of ``seconds``
    edge_links: tuple[str, ...] = ()  # link type of each data edge ring[i] -> ring[i+1] (cyclic; broadcast: chain)
    sharing: int = 0  # most ring edges (all groups) on one NeuronLink link / EFA port this ring uses
    nodes: int = 1  # instances the group spans


# --- cost ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Flow:
    """One ring (or send) and the shared resources its data edges use."""

    ring: tuple[int, ...]
    edges: tuple[tuple[int, int], ...]  # data-carrying ring edges (core -> core)
    edge_types: tuple[str, ...]
    hops: tuple[int, ...]  # torus hops of each data edge
    uses: Mapping[tuple, int]  # resource -> edge traversals
    spans: int  # nodes the ring spans
    senders: int


def _flow(instance: InstanceType, kind: str, group: tuple[int, ...]) -> _Flow:
    if kind == "send":
        ring = group
        edges: tuple[tuple[int, int], ...] = ((group[0], group[1]),)
        senders = 1
    else:
        ring = cached_ring_order(instance.core_count, instance.cores_per_device, tuple(sorted(group)))
        if kind == "broadcast":  # pipelined chain from the root, group[0]; the edge back to it is idle
            i = ring.index(group[0])
            ring = ring[i:] + ring[:i]
            edges = tuple(edge_list(ring, cyclic=False))
            senders = len(ring) - 1
        else:
            edges = tuple(edge_list(ring, cyclic=True)) if len(ring) > 1 else ()
            senders = len(ring)
    types: list[str] = []
    hops: list[int] = []
    uses: dict[tuple[str, int] | tuple[str, int, int, int], int] = {}
    for a, b in edges:
        (na, ca), (nb, cb) = core_place(instance, a), core_place(instance, b)
        if na != nb:
            types.append("efa")
            hops.append(0)
            for res in (("efa_out", na), ("efa_in", nb)):
                uses[res] = uses.get(res, 0) + 1
        elif ca == cb:
            types.append("intra_chip")
            hops.append(0)
        else:
            links = route_links(ca, cb)
            types.append("neuronlink")
            hops.append(len(links))
            for x, y in links:
                link = ("neuronlink", na, x, y)
                uses[link] = uses.get(link, 0) + 1
    spans = len({core_place(instance, c)[0] for c in ring})
    return _Flow(ring, edges, tuple(types), tuple(hops), MappingProxyType(uses), spans, senders)


def _fair_rates(flows: Sequence[_Flow], caps: Sequence[float], capacity: Mapping[str, float]) -> list[float]:
    """Max-min fair rates (progressive filling): every flow's rate grows together until the flow
    reaches its own cap or one resource it uses is full; that flow then stays where it is."""
    rates = [0.0] * len(flows)
    active = [i for i, f in enumerate(flows) if caps[i] > 0 and f.edges]
    while active:
        step = min(caps[i] - rates[i] for i in active)
        demand: dict[tuple, int] = {}
        for i in active:
            for res, n in flows[i].uses.items():
                demand[res] = demand.get(res, 0) + n
        used: dict[tuple, float] = {}
        for i, f in enumerate(flows):
            for res, n in f.uses.items():
                used[res] = used.get(res, 0.0) + n * rates[i]
        for res, n in demand.items():
            step = min(step, (capacity[res[0]] - used.get(res, 0.0)) / n)
        step = max(step, 0.0)
        for i in active:
            rates[i] += step
        full = {res for res in demand if used.get(res, 0.0) + demand[res] * step >= capacity[res[0]] * (1 - 1e-9)}
        active = [
            i for i in active if rates[i] < caps[i] * (1 - 1e-9) and not any(res in full for res in flows[i].uses)
        ]
    return rates


def _critical_extra(hops: Sequence[int], steps: int, cyclic: bool) -> int:
    """Torus hops beyond one that the slowest chunk crosses in ``steps`` consecutive ring edges."""
    extra = [max(0, h - 1) for h in hops]
    if not extra:
        return 0
    if not cyclic:
        return sum(extra[:steps])
    n = len(extra)
    laps, rest = divmod(steps, n)
    window = max((sum(extra[(i + k) % n] for k in range(rest)) for i in range(n)), default=0)
    return laps * sum(extra) + window


def _latency(kind: str, steps: int, flow: _Flow, links: CollectiveLinks) -> float:
    h = links.intra_hop
    extra = _critical_extra(flow.hops, steps, cyclic=kind not in ("send", "broadcast")) * h
    if kind == "send":
        return links.intra_floor + (links.inter_hop if flow.spans > 1 else 0.0) + extra
    latency = max(links.intra_floor, links.intra_floor + (steps - links.intra_floor_steps) * h)
    if flow.spans > 1:
        latency = max(
            latency,
            links.inter_floor
            + (steps - links.inter_floor_steps) * h
            + 2 * (flow.spans - links.inter_floor_nodes) * links.inter_hop,
        )
    return latency + extra


def neuronlink_bandwidth(instance: InstanceType) -> float:
    """Bytes/s of one NeuronLink-v2 link in one direction: per-chip figure / links per chip (derived)."""
    if instance.neuronlink_per_chip is None:
        return 0.0
    return instance.neuronlink_per_chip.base / instance.chip.links.neuronlink_ports.base


def cost_group_collective(
    kind: str,
    nbytes: int,
    group: Sequence[int],
    instance: InstanceType,
    concurrent: Sequence[Sequence[int]] = (),
    nodes: int | None = None,
    links: CollectiveLinks | None = None,
) -> GroupCollectiveCost:
    """Time and link traffic of one collective run by the NeuronCores ``group`` (global core ids).

    ``nbytes`` is sized as nccom-test sizes it (all-reduce: the buffer; all-gather: the gathered
    output; reduce-scatter: the input; broadcast, send: the message). ``concurrent`` are the other
    groups running the same collective (same size) at the same time; a group equal to ``group`` is
    skipped. ``nodes`` (the instances the core ids may number) defaults to as many as the ids
    need; ``links`` to :func:`~emulator.costmodel.collectives.links_for` ``(instance)``.
    """
    key = collective_kind(kind)
    try:
        size = operator.index(nbytes) if not isinstance(nbytes, bool) else -1
    except TypeError:
        size = -1
    if size < 0:
        raise ValueError(f"nbytes must be a non-negative integer, got {nbytes!r}")
    if nodes is None:
        nodes = nodes_needed(instance, [c for g in (group, *concurrent) for c in g])
    nodes = check_nodes(nodes)
    members = check_group(instance, group, nodes)
    if key == "send" and len(members) != 2:
        raise ValueError(f"send needs exactly 2 NeuronCores (source, destination), got {len(members)}")
    others: list[tuple[int, ...]] = []
    for k, other in enumerate(concurrent):
        checked = check_group(instance, other, nodes, f"concurrent group {k}")
        if key == "send" and len(checked) != 2:
            raise ValueError(f"concurrent group {k}: a send needs exactly 2 NeuronCores, got {len(checked)}")
        same = checked == members if key == "send" else sorted(checked) == sorted(members)
        if not same:
            others.append(checked)
    for g in (members, *others):
        require_links(instance, g)
    return _cost(key, size, members, tuple(others), instance, links or links_for(instance))


@lru_cache(maxsize=4096)
def _cost(
    key: str,
    nbytes: int,
    members: tuple[int, ...],
    others: tuple[tuple[int, ...], ...],
    instance: InstanceType,
    links: CollectiveLinks,
) -> GroupCollectiveCost:
    n = len(members)
    zero = MappingProxyType(dict.fromkeys(LINK_TYPES, 0))
    if n == 1:
        return GroupCollectiveCost(0.0, zero, members, 0, 0.0, nodes=1)

    steps, factor = steps_and_factor(key, n)
    flows = [_flow(instance, key, g) for g in (members, *others)]
    own = flows[0]
    caps = [links.intra_bandwidth if f.spans == 1 else links.inter_bandwidth for f in flows]
    capacity = {"neuronlink": neuronlink_bandwidth(instance), "efa_out": efa_bandwidth(instance)}
    capacity["efa_in"] = capacity["efa_out"]
    bandwidth = _fair_rates(flows, caps, capacity)[0]

    per_edge = nbytes if key in ("send", "broadcast") else factor * nbytes
    sent = dict.fromkeys(LINK_TYPES, 0.0)
    for t in own.edge_types:
        sent[t] += per_edge
    link_bytes = MappingProxyType({t: round(v / own.senders) for t, v in sent.items()})

    load: dict[tuple, int] = {}
    for f in flows:
        for res, k in f.uses.items():
            load[res] = load.get(res, 0) + k
    sharing = max((load[res] for res in own.uses), default=0)

    latency = _latency(key, steps, own, links)
    moved = factor * nbytes
    seconds = latency + (moved / bandwidth if moved else 0.0)
    return GroupCollectiveCost(
        seconds=seconds,
        link_bytes=link_bytes,
        ring=own.ring,
        hops=max(own.hops, default=0),
        bandwidth=bandwidth if math.isfinite(bandwidth) else 0.0,
        latency=latency,
        edge_links=own.edge_types,
        sharing=sharing,
        nodes=own.spans,
    )
