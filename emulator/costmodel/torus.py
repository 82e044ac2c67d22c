"""The Trn1 NeuronLink torus and the ring a replica group of NeuronCores runs its collectives on.

Topology (docs/collectives.md §1): trn1.32xlarge / trn1n.32xlarge hold 16 Trainium chips on a 4x4
2-D torus with wrap-around (chip ``d`` at row ``d // 4``, column ``d % 4``, four NeuronLink-v2
neighbours, :func:`~emulator.hardware.instance_types.torus_neighbours`); chip ``d`` owns
NeuronCores ``2d`` and ``2d + 1``. trn1.2xlarge is one chip, no NeuronLink. Across instances
("nodes") a core is numbered globally: core ``c`` is core ``c % 32`` of node ``c // 32`` (the
rank layout of ``emulator/parallel/plan.py``, and the ``node * cores + core`` id an exec rank
publishes, ``emulator/runtime/placement.py``).

:func:`ring_order` is the order a ring collective visits a group's cores; the cost of the ring is
:mod:`emulator.costmodel.topology`'s. Pure functions, torch-free.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Iterable, Sequence
from functools import cache, lru_cache
from typing import SupportsIndex

from emulator.hardware.instance_types import TORUS_COLS, TORUS_ROWS, InstanceType

_EXACT_TOUR_CHIPS = 8  # tours of up to this many chips are searched exhaustively (7!/2 = 2,520 tours)


# --- checks and places ----------------------------------------------------------------------------------


def _check_core(instance: InstanceType, core: object, nodes: int) -> int:
    if isinstance(core, bool) or not isinstance(core, SupportsIndex):
        raise ValueError(f"NeuronCore {core!r} is not an integer")
    try:
        c = operator.index(core)
    except TypeError:
        raise ValueError(f"NeuronCore {core!r} is not an integer") from None
    total = instance.core_count * nodes
    if not 0 <= c < total:
        raise ValueError(
            f"NeuronCore {c} out of range 0-{total - 1} ({nodes} {instance.name} node{'s' if nodes > 1 else ''})"
        )
    return c


def check_group(instance: InstanceType, cores: Sequence[int], nodes: int, what: str = "group") -> tuple[int, ...]:
    if isinstance(cores, str | bytes):
        raise ValueError(f"{what} must be a sequence of NeuronCore ids, got {cores!r}")
    checked = tuple(_check_core(instance, c, nodes) for c in cores)
    if not checked:
        raise ValueError(f"{what} has no NeuronCores")
    seen: set[int] = set()
    for c in checked:
        if c in seen:
            raise ValueError(f"{what} lists NeuronCore {c} twice")
        seen.add(c)
    return checked


def nodes_needed(instance: InstanceType, cores: Iterable[object]) -> int:
    """As many nodes as the (global) core ids need: the default of ``nodes`` below."""
    ids = [c for c in cores if isinstance(c, int) and not isinstance(c, bool)]
    return max(1, max(ids, default=0) // instance.core_count + 1)


def check_nodes(nodes: int) -> int:
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ValueError(f"nodes must be a positive integer, got {nodes!r}")
    return nodes


def core_place(instance: InstanceType, core: int) -> tuple[int, int]:
    """``(node, chip)`` of a global NeuronCore id: core ``c`` is core ``c % core_count`` of node ``c // core_count``."""
    node, local = divmod(core, instance.core_count)
    return node, local // instance.cores_per_device


def torus_hops(a: int, b: int, rows: int = TORUS_ROWS, cols: int = TORUS_COLS) -> int:
    """Shortest number of NeuronLink hops between chips ``a`` and ``b`` of the wrap-around torus."""
    (ra, ca), (rb, cb) = divmod(a, cols), divmod(b, cols)
    dr, dc = abs(ra - rb), abs(ca - cb)
    return min(dr, rows - dr) + min(dc, cols - dc)


@cache
def torus_route(a: int, b: int, rows: int = TORUS_ROWS, cols: int = TORUS_COLS) -> tuple[int, ...]:
    """Chips a message visits from ``a`` to ``b`` (both included) on a shortest path.

    Dimension order: first along the row (columns), then along the column (rows); a tie between
    the two ways round (distance 2 on a ring of 4) goes the increasing way. An assumption: the
    runtime's routing is not documented, only that any chip can reach every chip's HBM.
    """
    for chip in (a, b):
        if not 0 <= chip < rows * cols:
            raise ValueError(f"chip {chip} not on a {rows}x{cols} torus")
    r, c = divmod(a, cols)
    rb, cb = divmod(b, cols)
    path = [a]
    delta = (cb - c) % cols
    step = 1 if delta <= cols // 2 else -1
    while c != cb:
        c = (c + step) % cols
        path.append(r * cols + c)
    delta = (rb - r) % rows
    step = 1 if delta <= rows // 2 else -1
    while r != rb:
        r = (r + step) % rows
        path.append(r * cols + c)
    return tuple(path)


def route_links(a: int, b: int) -> tuple[tuple[int, int], ...]:
    path = torus_route(a, b)
    return tuple(itertools.pairwise(path))


# --- ring order -----------------------------------------------------------------------------------------


def edge_list(tour: Sequence[int], cyclic: bool) -> list[tuple[int, int]]:
    pairs = list(itertools.pairwise(tour))
    if cyclic and len(tour) > 1:
        pairs.append((tour[-1], tour[0]))
    return pairs


def _tour_score(tour: Sequence[int], cyclic: bool = True) -> tuple[int, int, int]:
    """(most uses of one directed link by this tour alone, total hops, longest hop): smaller is better."""
    load: dict[tuple[int, int], int] = {}
    total = longest = 0
    for a, b in edge_list(tour, cyclic):
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
def cached_ring_order(cores_per_node: int, cores_per_device: int, cores: tuple[int, ...]) -> tuple[int, ...]:
    """:func:`ring_order` of checked, sorted ``cores`` (cached)."""
    by_node: dict[int, dict[int, list[int]]] = {}
    for core in cores:
        node, local = divmod(core, cores_per_node)
        by_node.setdefault(node, {}).setdefault(local // cores_per_device, []).append(core)
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
    group = check_group(instance, cores, check_nodes(nodes_needed(instance, cores) if nodes is None else nodes), "ring")
    require_links(instance, group)
    return cached_ring_order(instance.core_count, instance.cores_per_device, tuple(sorted(group)))


def require_links(instance: InstanceType, group: Sequence[int]) -> None:
    """ValueError when ``group`` needs a link between devices of one node that the instance lacks."""
    if instance.torus or instance.device_count == 1:
        return
    chips = {core_place(instance, c) for c in group}
    if len({node for node, _ in chips}) < len(chips):
        raise ValueError(f"{instance.name} has no NeuronLink between its devices")
