"""Text drawing shared by the widgets: bars, sparklines, styles, column layout."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Span, Text

BAR_CHAR = "|"  # U+007C, as the real tool draws its bars
SPARK_CHARS = "▁▂▃▄▅▆▇█"
FILLED = "green"
EMPTY = "grey37"
SYSTEM = "red"
NA_STYLE = "dim"
SECTION = "bold white on dark_blue"
TITLE = "bold black on green"
ACTIVE_TAB = "bold green"
BANNER = "bold white on red"
SELECTED_ROW = "reverse"
MIN_BAR = 6
GROUP_GAP = 2


class LineBuilder:
    """Collects one line's text and styled spans and makes the ``Text`` once: what appending to a
    ``Text`` piece by piece gives (same text, same spans), for less (rich checks and copies at
    every append). For lines drawn every second, like the core grid's."""

    def __init__(self, text: str = "") -> None:
        self._parts = [text]
        self._spans: list[Span] = []
        self._length = len(text)

    def append(self, text: str, style: str | None = None) -> None:
        if text:
            if style:
                self._spans.append(Span(self._length, self._length + len(text), style))
            self._parts.append(text)
            self._length += len(text)

    def append_text(self, text: Text) -> None:
        """A ``Text`` without a style of its own (its spans move along)."""
        self._spans.extend(Span(start + self._length, end + self._length, style) for start, end, style in text.spans)
        self._parts.append(text.plain)
        self._length += len(text)

    def text(self) -> Text:
        return Text("".join(self._parts), spans=self._spans)


def bar(width: int, *parts: tuple[float | None, str]) -> Text:
    """``width`` bar characters: each (share, style) part filled in turn (1 fills the bar), the rest grey.

    Unknown values fill nothing; the total is capped at the bar's width.
    """
    text = Text()
    append_bar(text, width, *parts)
    return text


def append_bar(text: Text | LineBuilder, width: int, *parts: tuple[float | None, str]) -> None:
    """``bar(width, *parts)`` appended to ``text`` (no intermediate ``Text``)."""
    used = 0
    for share, style in parts:
        if share is None or width <= 0:
            continue
        cells = min(round(max(share, 0.0) * width), width - used)
        if cells > 0:
            text.append(BAR_CHAR * cells, style)
            used += cells
    text.append(BAR_CHAR * (width - used), EMPTY)


def sparkline(values: Sequence[float | None], width: int) -> Text:
    """The last ``width`` values (shares 0-1) as block characters, right-aligned; a gap
    (``None``: nothing known then) is a blank."""
    shown = list(values)[-width:] if width > 0 else []
    text = Text(" " * (width - len(shown)))
    top = len(SPARK_CHARS) - 1
    for value in shown:
        if value is None:
            text.append(" ")
            continue
        level = min(max(math.ceil(value * top), 0), top) if value > 0 else 0
        text.append(SPARK_CHARS[level], FILLED)
    return text


def section(label: str, width: int, right: str = "") -> Text:
    line = Text(label, SECTION)
    if right:
        line.append(" " * max(width - len(label) - len(right), 1), SECTION)
        line.append(right, SECTION)
    line.append(" " * max(width - line.cell_len, 0), SECTION)
    line.truncate(width)
    return line


@dataclass(frozen=True)
class GroupLayout:
    """How a grid of ``rows`` labelled rows is laid out side by side in column groups."""

    groups: int
    rows_per_group: int
    group_width: int


def column_groups(rows: int, width: int, avail_rows: int, min_group: int) -> GroupLayout:
    """As many groups as needed to show every row within ``avail_rows`` lines, if they fit the width."""
    wanted = max(1, math.ceil(rows / max(avail_rows, 1)))
    fit = max(1, (width + GROUP_GAP) // (min_group + GROUP_GAP))
    groups = max(1, min(wanted, fit, rows or 1))
    group_width = (width - GROUP_GAP * (groups - 1)) // groups
    return GroupLayout(groups, math.ceil(rows / groups) if rows else 0, group_width)


def join_groups(cells: Sequence[Text], layout: GroupLayout) -> list[Text]:
    """Lay ``cells`` (one per row, each ``group_width`` wide) out column-major in ``layout.groups``."""
    lines = []
    for r in range(layout.rows_per_group):
        line = Text()
        for g in range(layout.groups):
            index = g * layout.rows_per_group + r
            if index >= len(cells):
                break
            if g:
                line.append(" " * GROUP_GAP)
            cell = cells[index].copy()
            cell.truncate(layout.group_width, pad=True)
            line.append_text(cell)
        lines.append(line)
    return lines


def fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` columns (with an ellipsis) or padded to it."""
    if len(text) > width:
        return text[: max(width - 1, 0)] + "…" if width > 0 else ""
    return text.ljust(width)
