"""Memory Usage Details: the device -> core -> model -> category tree with a selected row.

Keys (through the app): up/down move the selection, right expands, left collapses (or goes to the
parent), Enter toggles, ``x`` expands or collapses everything. Expansion and selection follow
node keys, so they survive refreshes and tab switches. Only the rows that fit are drawn; the
window scrolls to keep the selection visible. The tree is rebuilt only where the memory changed
(``TreeCache``), and its rows only when the tree or the expansion did.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from neurontools.top.formats import fmt_bytes
from neurontools.top.memory_tree import (
    NO_HOST,
    Row,
    TreeCache,
    TreeNode,
    all_keys,
    build_tree,
    parent_key,
    visible_rows,
)
from neurontools.top.model import Sample
from neurontools.top.state import DisplayState
from neurontools.top.widgets.drawing import NA_STYLE, SECTION, SELECTED_ROW, fit
from neurontools.top.widgets.panel import TextPanel

ID_W, DEV_W, HOST_W = 10, 15, 13
TITLE = "Memory Usage Details"


class MemoryTreeView(TextPanel):
    DEFAULT_CSS = """
    MemoryTreeView { height: 1fr; min-height: 3; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.nodes: tuple[TreeNode, ...] = ()
        self.expanded: dict[str, bool] = {}
        self.selected_key: str | None = None
        self.top = 0
        self.cache = TreeCache()
        self._rows: tuple[tuple[TreeNode, ...], tuple[tuple[str, bool], ...], list[Row]] | None = None

    def show(self, sample: Sample, state: DisplayState) -> None:
        self.nodes = build_tree(sample, state.pid, self.cache)
        super().show(sample, state)

    # -- navigation -----------------------------------------------------------------------------

    @property
    def rows(self) -> list[Row]:
        """The visible rows (the last ones again while the tree and the expansion are the same)."""
        expanded = tuple(self.expanded.items())
        if self._rows is None or self._rows[0] is not self.nodes or self._rows[1] != expanded:
            self._rows = (self.nodes, expanded, visible_rows(self.nodes, self.expanded))
        return self._rows[2]

    def selected_index(self, rows: list[Row]) -> int:
        keys = [row.node.key for row in rows]
        key = self.selected_key
        while key is not None:  # a hidden or vanished node: select its nearest visible ancestor
            if key in keys:
                return keys.index(key)
            key = parent_key(key)
        return 0

    def _select(self, rows: list[Row], index: int) -> None:
        if rows:
            self.selected_key = rows[max(0, min(index, len(rows) - 1))].node.key
        self.redraw()

    def move(self, delta: int) -> None:
        rows = self.rows
        self._select(rows, self.selected_index(rows) + delta)

    def set_open(self, is_open: bool) -> None:
        """Right: expand the selected node; left: collapse it, or go to its parent."""
        rows = self.rows
        if not rows:
            return
        row = rows[self.selected_index(rows)]
        if row.node.children and row.expanded != is_open:
            self.expanded[row.node.key] = is_open
        elif not is_open and parent_key(row.node.key) is not None:
            self.selected_key = parent_key(row.node.key)
        self.redraw()

    def toggle(self) -> None:
        rows = self.rows
        if rows:
            row = rows[self.selected_index(rows)]
            if row.node.children:
                self.expanded[row.node.key] = not row.expanded
        self.redraw()

    def toggle_all(self) -> None:
        """Expand every node, or collapse every node when all are already expanded."""
        keys = all_keys(self.nodes)
        open_rows = {row.node.key for row in self.rows if row.expanded}
        expand = not all(key in open_rows for key in keys)
        self.expanded = dict.fromkeys(keys, expand)
        self.redraw()

    # -- drawing --------------------------------------------------------------------------------

    def key(self) -> Any:
        # the same tree object while nothing in it changed (TreeCache)
        window = (self.is_attached, self.size.height, self.top, self.selected_key)
        return (self.nodes, tuple(self.expanded.items()), window)

    def get_content_height(self, container: object, viewport: object, width: int) -> int:
        return max(len(self.rows) + 1, 2)

    def _header(self, width: int) -> Text:
        label_w = max(width - ID_W - DEV_W - HOST_W, 1)
        text = fit(TITLE, label_w) + "Model ID".ljust(ID_W) + "Device Memory".rjust(DEV_W) + "Host Memory".rjust(HOST_W)
        return Text(fit(text, width), SECTION)

    def _row(self, row: Row, width: int, selected: bool) -> Text:
        node = row.node
        label_w = max(width - ID_W - DEV_W - HOST_W, 1)
        marker = ("[-] " if row.expanded else "[+] ") if node.children else ""
        line = Text(fit("  " * row.depth + marker + node.label, max(label_w - 1, 0)) + " ")
        line.append(fit(node.model_id, ID_W), "dim")
        dev = fmt_bytes(node.device_bytes)
        line.append(dev.rjust(DEV_W), "" if node.device_bytes is not None else NA_STYLE)
        host = "" if node.host_bytes == NO_HOST else fmt_bytes(node.host_bytes)
        line.append(host.rjust(HOST_W), "" if node.host_bytes is not None else NA_STYLE)
        line.truncate(width, pad=True)
        if selected:
            line.stylize(SELECTED_ROW)
        return line

    def lines(self, width: int) -> list[Text]:
        rows = self.rows
        window = max(self.size.height - 1, 1) if self.is_attached and self.size.height else len(rows)
        index = self.selected_index(rows)
        if index < self.top:
            self.top = index
        elif index >= self.top + window:
            self.top = index - window + 1
        self.top = max(0, min(self.top, max(len(rows) - window, 0)))
        shown = rows[self.top : self.top + window]
        return [self._header(width)] + [self._row(r, width, self.top + i == index) for i, r in enumerate(shown)]
