"""The ``Neuron Device Topology`` diagram of ``neuron-ls --topology`` (docs/reference/neuron-ls.md §Topology diagram).

The grid is derived from each device's ``connected_to`` list, whose four entries are the
neighbours **up, left, down, right** (docs/reference/trn1-platform.md §Torus). A trn1.32xlarge 4x4 torus gives::

    Neuron Device Topology
          *        *        *        *
          │        │        │        │
          ▼        ▼        ▼        ▼
    *––►[ 0 ]◄––►[ 1 ]◄––►[ 2 ]◄––►[ 3 ]◄––*
          ▲        ▲        ▲        ▲
    ...

Every diagram line has the full grid width (40 columns for 4 columns of nodes), trailing spaces
included. Each node is ``[%2d ]``; between nodes a 4-cell horizontal link, on the sides a 4-cell
wrap-around end; vertical links are three lines centred under the node (``▲ │ ▼``), and a
wrap-around above the first / below the last row is drawn with ``*`` instead of the arrow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

TITLE = "Neuron Device Topology"
LEGEND = ("Legend:", "", "        *––► = Wrap-around link")

H_LINK = "◄––►"  # U+25C4, 2 x U+2013, U+25BA
WRAP_LEFT = "*––►"
WRAP_RIGHT = "◄––*"
NO_LINK = "    "
UP_ARROW, V_BAR, DOWN_ARROW, WRAP_END = "▲", "│", "▼", "*"

NODE_WIDTH = 5
LINK_WIDTH = 4

# Position of each neighbour in a ``connected_to`` list.
UP, LEFT, DOWN, RIGHT = range(4)

Links = Mapping[int, Sequence[int] | None]


@dataclass(frozen=True)
class Grid:
    """Devices laid out in rows and columns, with which links exist.

    ``right[r][c]``: node (r, c) is linked to (r, c+1); ``down[r][c]``: (r, c) to (r+1, c);
    ``wrap_row[r]``: the last node of row r links back to its first; ``wrap_col[c]`` likewise
    from the bottom of column c to its top.
    """

    nodes: tuple[tuple[int, ...], ...]
    right: tuple[tuple[bool, ...], ...]
    down: tuple[tuple[bool, ...], ...]
    wrap_row: tuple[bool, ...]
    wrap_col: tuple[bool, ...]

    @property
    def has_wrap(self) -> bool:
        return any(self.wrap_row) or any(self.wrap_col)


def node_label(index: int) -> str:
    return f"[{index:2d} ]"


def _neighbour(links: Links, node: int, direction: int) -> int | None:
    conn = links.get(node)
    if not conn or len(conn) != 4:
        return None
    other = conn[direction]
    return other if other in links else None


def _walk(links: Links, start: int, direction: int) -> tuple[list[int], bool] | None:
    """Nodes met from ``start`` going in ``direction`` until the path ends or comes back to
    ``start`` (then the bool is True). None when the path loops without passing ``start``."""
    path = [start]
    cur = _neighbour(links, start, direction)
    while cur is not None and cur != start:
        if cur in path:
            return None
        path.append(cur)
        cur = _neighbour(links, cur, direction)
    return path, cur == start


def derive_grid(links: Links) -> Grid | None:
    """Lay out the devices from their up/left/down/right neighbour lists.

    The top-left node is the lowest device index, moved to the left/top end of its row/column
    when the links do not wrap (a mesh). Rows follow the ``right`` links, columns the ``down``
    links. Returns None when the links do not form a complete rectangular grid.
    """
    if not links:
        return None
    origin = min(links)
    for direction in (LEFT, UP):
        walked = _walk(links, origin, direction)
        if walked is None:
            return None
        path, wrapped = walked
        if not wrapped:
            origin = path[-1]
    first_row = _walk(links, origin, RIGHT)
    if first_row is None:
        return None
    columns: list[list[int]] = []
    for top in first_row[0]:
        col = _walk(links, top, DOWN)
        if col is None:
            return None
        columns.append(col[0])
    n_rows = len(columns[0])
    if any(len(col) != n_rows for col in columns):
        return None
    nodes = tuple(tuple(col[r] for col in columns) for r in range(n_rows))
    flat = [n for row in nodes for n in row]
    if len(set(flat)) != len(flat) or set(flat) != set(links):
        return None
    n_cols = len(columns)

    def linked(a: int, b: int, direction: int) -> bool:
        return _neighbour(links, a, direction) == b

    return Grid(
        nodes=nodes,
        right=tuple(tuple(linked(row[c], row[c + 1], RIGHT) for c in range(n_cols - 1)) for row in nodes),
        down=tuple(tuple(linked(nodes[r][c], nodes[r + 1][c], DOWN) for c in range(n_cols)) for r in range(n_rows - 1)),
        wrap_row=tuple(linked(row[-1], row[0], RIGHT) for row in nodes),
        wrap_col=tuple(linked(nodes[-1][c], nodes[0][c], DOWN) for c in range(n_cols)),
    )


def _vertical_line(marks: Sequence[str | None], width: int) -> str:
    """A line with ``marks[c]`` (or a space) centred under node column c."""
    cells = [" "] * width
    for c, mark in enumerate(marks):
        if mark:
            cells[LINK_WIDTH + c * (NODE_WIDTH + LINK_WIDTH) + NODE_WIDTH // 2] = mark
    return "".join(cells)


def _vertical_block(flags: Sequence[bool], top: str, bottom: str, width: int) -> list[str]:
    return [_vertical_line([s if f else None for f in flags], width) for s in (top, V_BAR, bottom)]


def grid_lines(grid: Grid) -> list[str]:
    """The diagram body (no title, no legend)."""
    n_cols = len(grid.nodes[0])
    width = 2 * LINK_WIDTH + n_cols * NODE_WIDTH + (n_cols - 1) * LINK_WIDTH
    lines: list[str] = []
    if any(grid.wrap_col):
        lines += _vertical_block(grid.wrap_col, WRAP_END, DOWN_ARROW, width)
    for r, row in enumerate(grid.nodes):
        wrap = grid.wrap_row[r]
        parts = [WRAP_LEFT if wrap else NO_LINK, node_label(row[0])]
        for c in range(1, n_cols):
            parts += [H_LINK if grid.right[r][c - 1] else NO_LINK, node_label(row[c])]
        parts.append(WRAP_RIGHT if wrap else NO_LINK)
        lines.append("".join(parts))
        if r < len(grid.nodes) - 1:
            lines += _vertical_block(grid.down[r], UP_ARROW, DOWN_ARROW, width)
    if any(grid.wrap_col):
        lines += _vertical_block(grid.wrap_col, UP_ARROW, WRAP_END, width)
    return lines


def topology_lines(links: Links) -> list[str]:
    """Title, diagram and (when a wrap-around link is drawn) legend, one string per line.

    Devices without any link (a single-device trn1.2xlarge, whose ``connected_to`` is null) or
    whose links do not form a grid: the real output is undocumented (docs/reference/neuron-ls.md
    §Topology diagram). Our choice: the title, a blank line and the nodes on one line (``[ 0 ]``),
    no legend since no wrap-around link is drawn.
    """
    has_links = any(conn for conn in links.values())
    grid = derive_grid(links) if has_links else None
    if grid is None:
        return [TITLE, "", NO_LINK.join(node_label(i) for i in sorted(links))]
    lines = [TITLE, *grid_lines(grid)]
    if grid.has_wrap:
        lines += ["", *LEGEND]
    return lines
