"""Where a NeuronCore is and how chips reach each other: a global core's (node, chip), checked
core groups, and shortest routes on the 4x4 NeuronLink torus (docs/collectives.md §1). Pure
functions, torch-free; ``topology.py`` costs collectives on them."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from functools import cache
from typing import SupportsIndex

from emulator.hardware.instance_types import TORUS_COLS, TORUS_ROWS, InstanceType


def check_core(instance: InstanceType, core: object, nodes: int) -> int:
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
    checked = tuple(check_core(instance, c, nodes) for c in cores)
    if not checked:
        raise ValueError(f"{what} has no NeuronCores")
    seen: set[int] = set()
    for c in checked:
        if c in seen:
            raise ValueError(f"{what} lists NeuronCore {c} twice")
        seen.add(c)
    return checked


def check_nodes(nodes: int) -> int:
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ValueError(f"nodes must be a positive integer, got {nodes!r}")
    return nodes


def core_place(instance: InstanceType, core: int) -> tuple[int, int]:
    """``(node, chip)`` of a global NeuronCore id: core ``c`` is core ``c % core_count`` of node ``c // core_count``."""
    node, local = divmod(core, instance.core_count)
    return node, instance.layout.device_of(local)


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
