"""Collectives of a replica group of concrete NeuronCores, costed on the instance's real links.

:func:`~emulator.costmodel.collectives.cost_collective` knows only how many ranks take part;
this module knows *which* cores, so the links a placement uses decide the cost (docs/collectives.md).

Topology (docs/collectives.md §1): trn1.32xlarge / trn1n.32xlarge hold 16 Trainium chips on a 4x4
2-D torus with wrap-around (chip ``d`` at row ``d // 4``, column ``d % 4``, four NeuronLink-v2
neighbours, :func:`~emulator.hardware.instance_types.torus_neighbours`); chip ``d`` owns
NeuronCores ``2d`` and ``2d + 1``. trn1.2xlarge is one chip, no NeuronLink. Across instances
("nodes") a core is numbered globally: core ``c`` is core ``c % 32`` of node ``c // 32`` (the
rank layout of ``emulator/parallel/plan.py``). Placement and routes: ``torus.py``.

Model, per ring (the group's cores in :func:`ring_order`)::

    ring edge        intra_chip (same chip) | neuronlink (torus route, dimension order) | efa (other node)
    latency          L(s, N) + extra * h_intra           extra = torus hops beyond 1 on the critical path
    L(s, 1)          max(L_2, L_2 + (s - 2) * h_intra)                      as cost_collective
    L(s, N >= 2)     max(L(s, 1), L_64 + (s - 126) * h_intra + 2 (N - 2) h_inter)   as cost_collective
    bandwidth        max-min fair share: each ring at most bw_intra (one node) or bw_inter (several),
                     each directed NeuronLink at most 96 GB/s (trn1) summed over the ring edges routed
                     through it, each node's EFA egress / ingress at most the instance network bandwidth
    seconds          latency + f * B / bandwidth

``s`` and ``f`` are the ring steps and bytes factor of collectives.py (all-reduce ``2(n-1)``,
``2(n-1)/n``; all-gather, reduce-scatter, all-to-all ``n-1``, ``(n-1)/n``; broadcast ``n-1``, 1).
``send`` is one message from ``group[0]`` to ``group[1]``: latency ``L_2`` plus its extra torus
hops (``+ h_inter`` when it crosses nodes), bytes ``B``.

So a group of two cores of one chip reproduces ``cost_collective`` exactly, and so does a
one-node group whose ring edges are all one hop (the Megatron layouts) or a 64-core 2-node group.
Pure functions, torch-free.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

from emulator.costmodel.collectives import CollectiveLinks, links_for, steps_and_factor
from emulator.costmodel.torus import check_group, check_nodes, core_place, route_links, torus_hops
from emulator.hardware.instance_types import TORUS_COLS, InstanceType
from neurontools.contract.inventory import CoreLayout

LINK_TYPES = ("intra_chip", "neuronlink", "efa")
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send")
_ALIASES = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "p2p": "send",
    "send_recv": "send",
}
_EXACT_TOUR_CHIPS = 8  # tours of up to this many chips are searched exhaustively (7!/2 = 2,520 tours)


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


# --- ring order -----------------------------------------------------------------------------------------


def _edge_list(tour: Sequence[int], cyclic: bool) -> list[tuple[int, int]]:
    pairs = list(itertools.pairwise(tour))
    if cyclic and len(tour) > 1:
        pairs.append((tour[-1], tour[0]))
    return pairs


def _tour_score(tour: Sequence[int], cyclic: bool = True) -> tuple[int, int, int]:
    """(most uses of one directed link by this tour alone, total hops, longest hop): smaller is better."""
    load: dict[tuple[int, int], int] = {}
    total = longest = 0
    for a, b in _edge_list(tour, cyclic):
        links = route_links(a, b)
        total += len(links)
        longest = max(longest, len(links))
        for link in links:
            load[link] = load.get(link, 0) + 1
    return (max(load.values(), default=0), total, longest)


def _canonical(tour: Sequence[int]) -> tuple[int, ...]:
    """Rotation starting at the smallest chip, in the direction whose second chip is smaller."""
    i = tour.index(min(tour))
    forward = tuple(tour[i:]) + tuple(tour[:i])
    backward = (forward[0], *reversed(forward[1:]))
    return min(forward, backward)


def _snake(chips: Iterable[int], by_rows: bool) -> list[int]:
    def key(chip: int) -> tuple[int, int]:
        r, c = divmod(chip, TORUS_COLS)
        major, minor = (r, c) if by_rows else (c, r)
        return (major, minor if major % 2 == 0 else -minor)

    return sorted(chips, key=key)


def _nearest_neighbour(chips: Sequence[int], start: int) -> list[int]:
    tour, left = [start], set(chips) - {start}
    while left:
        here = tour[-1]
        nxt = min(left, key=lambda c: (torus_hops(here, c), c))
        tour.append(nxt)
        left.remove(nxt)
    return tour


def _improve(tour: list[int]) -> list[int]:
    """2-opt (reverse a segment) and or-opt (move one chip) until neither helps."""
    best, score = tour, _tour_score(tour)
    improved = True
    while improved:
        improved = False
        m = len(best)
        for i, j in itertools.combinations(range(1, m), 2):
            cand = best[:i] + best[i : j + 1][::-1] + best[j + 1 :]
            s = _tour_score(cand)
            if s < score:
                best, score, improved = cand, s, True
        for i, j in itertools.permutations(range(m), 2):
            cand = best[:i] + best[i + 1 :]
            cand.insert(j, best[i])
            s = _tour_score(cand)
            if s < score:
                best, score, improved = cand, s, True
    return best


@lru_cache(maxsize=4096)
def _chip_tour(chips: tuple[int, ...]) -> tuple[int, ...]:
    """A short cyclic tour of torus chips: exhaustive up to 8 chips, else best of local searches.

    Stops at the first tour that reaches the lower bound (every edge one hop, no link used twice).
    Ties: the exhaustive search keeps the lexicographically first tour, the local search the first
    of its starts (row snake, column snake, nearest neighbour from each chip).
    """
    m = len(chips)
    if m <= 2:
        return chips
    bound = (1, m, 1)
    if m <= _EXACT_TOUR_CHIPS:
        first, rest = chips[0], chips[1:]
        candidates: Iterable[tuple[int, ...]] = ((first, *p) for p in itertools.permutations(rest) if p[0] < p[-1])
    else:
        starts = [_snake(chips, True), _snake(chips, False)] + [_nearest_neighbour(chips, c) for c in chips]
        candidates = (tuple(_improve(list(t))) for t in starts)
    best: tuple[int, ...] = ()
    best_score = (math.inf, math.inf, math.inf)
    for tour in candidates:
        score = _tour_score(tour)
        if score < best_score:
            best, best_score = tour, score
            if score == bound:
                break
    return _canonical(best)


def _path_from_tour(tour: tuple[int, ...]) -> tuple[int, ...]:
    """Open the cyclic tour where the resulting path scores best (for a ring that leaves the node)."""
    if len(tour) <= 1:
        return tour
    cuts = [tour[i:] + tour[:i] for i in range(len(tour))]
    return min(cuts, key=lambda p: (_tour_score(p, cyclic=False), p))


@lru_cache(maxsize=4096)
def _ring_order(layout: CoreLayout, cores: tuple[int, ...]) -> tuple[int, ...]:
    by_node: dict[int, dict[int, list[int]]] = {}
    for core in cores:
        node, local = divmod(core, layout.core_count)
        by_node.setdefault(node, {}).setdefault(layout.device_of(local), []).append(core)
    spans = len(by_node) > 1
    ring: list[int] = []
    for node in sorted(by_node):
        chips = by_node[node]
        tour = _chip_tour(tuple(sorted(chips)))
        if spans:
            tour = _path_from_tour(tour)
        for chip in tour:
            ring.extend(sorted(chips[chip]))
    i = ring.index(min(ring))  # a cycle: list it from its smallest core
    return tuple(ring[i:] + ring[:i])


def ring_order(instance: InstanceType, cores: Sequence[int], nodes: int | None = None) -> tuple[int, ...]:
    """The order in which a ring collective of ``cores`` visits them.

    The cores of one chip are neighbours (their edge stays on the chip); the chips of one node
    follow a short torus tour (fewest uses of one NeuronLink by the ring itself, then fewest hops,
    then the shortest longest hop); a group spanning nodes visits the nodes in order, each as a
    path, joined by EFA. Starts at the smallest core; independent of the order ``cores`` is given in.
    ``nodes`` defaults to as many as the core ids need.
    """
    if nodes is None:
        ids = [c for c in cores if isinstance(c, int) and not isinstance(c, bool)]
        nodes = max(1, max(ids, default=0) // instance.core_count + 1)
    group = check_group(instance, cores, check_nodes(nodes), "ring")
    _require_links(instance, group)
    return _ring_order(instance.layout, tuple(sorted(group)))


def _require_links(instance: InstanceType, group: Sequence[int]) -> None:
    if instance.torus or instance.device_count == 1:
        return
    chips = {core_place(instance, c) for c in group}
    if len({node for node, _ in chips}) < len(chips):
        raise ValueError(f"{instance.name} has no NeuronLink between its devices")


# --- cost ---------------------------------------------------------------------------------------------


def _normalize_kind(kind: str) -> str:
    key = kind.lower().replace("-", "_").replace(" ", "_") if isinstance(kind, str) else ""
    key = _ALIASES.get(key, key)
    if key not in KINDS:
        raise ValueError(f"unknown collective {kind!r}; known: {', '.join(KINDS)}")
    return key


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
        ring = _ring_order(instance.layout, tuple(sorted(group)))
        if kind == "broadcast":  # pipelined chain from the root, group[0]; the edge back to it is idle
            i = ring.index(group[0])
            ring = ring[i:] + ring[:i]
            edges = tuple(_edge_list(ring, cyclic=False))
            senders = len(ring) - 1
        else:
            edges = tuple(_edge_list(ring, cyclic=True)) if len(ring) > 1 else ()
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


def efa_bandwidth(instance: InstanceType) -> float:
    """Bytes/s one instance sends (and receives) over its network: 800 Gbps = 100 GB/s on trn1.32xlarge."""
    return (instance.efa_bandwidth or instance.network_bandwidth).base


def cost_group_collective(
    kind: str,
    nbytes: int,
    group: Sequence[int],
    instance: InstanceType,
    concurrent: Sequence[Sequence[int]] = (),
    nodes: int = 1,
    links: CollectiveLinks | None = None,
) -> GroupCollectiveCost:
    """Time and link traffic of one collective run by the NeuronCores ``group`` (global core ids).

    ``nbytes`` is sized as nccom-test sizes it (all-reduce: the buffer; all-gather: the gathered
    output; reduce-scatter: the input; broadcast, send: the message). ``concurrent`` are the other
    groups running the same collective (same size) at the same time; a group equal to ``group`` is
    skipped. ``links`` defaults to :func:`~emulator.costmodel.collectives.links_for` ``(instance)``.
    """
    key = _normalize_kind(kind)
    try:
        size = operator.index(nbytes) if not isinstance(nbytes, bool) else -1
    except TypeError:
        size = -1
    if size < 0:
        raise ValueError(f"nbytes must be a non-negative integer, got {nbytes!r}")
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
        _require_links(instance, g)
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

    if key == "send":
        steps, factor = 1, 1.0
    else:
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
