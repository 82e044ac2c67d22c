"""Bordered tables in the neuron-ls style (docs/reference/neuron-ls.md §Table rendering rules).

A table has columns with a two-line header and rows organised in groups (one group per device:
the device row, then continuation rows for its further processes). Example::

    +--------+------+
    | NEURON | PID  |
    | DEVICE |      |
    +--------+------+
    | 0      | 4242 |
    |        | 4391 |
    +--------+------+

Widths are measured in terminal cells (wide East Asian characters count 2, combining marks 0)
so that non-ASCII commands keep the grid aligned; for ASCII text this is the plain length.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

Header = tuple[str, str]
Row = Sequence[str]
Group = Sequence[Row]

ELLIPSIS = "..."


def char_width(ch: str) -> int:
    """Terminal cells taken by one code point: 0 for combining/format marks, 2 for wide CJK, else 1."""
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def display_width(text: str) -> int:
    """Terminal cells taken by ``text`` (equals ``len(text)`` for ASCII)."""
    if text.isascii():
        return len(text)
    return sum(char_width(ch) for ch in text)


def truncate(text: str, limit: int) -> str:
    """Rule 8: text longer than ``limit`` characters becomes its first ``limit - 3`` plus ``...``.

    Lengths are counted in characters (code points), so a multi-byte character is never split.
    """
    if len(text) <= limit:
        return text
    keep = max(limit - len(ELLIPSIS), 0)
    return text[:keep] + ELLIPSIS


def sanitize_cell(text: str) -> str:
    """Make ``text`` safe to draw on one table line.

    Control characters (newline, tab, escape...) would break the grid: each becomes ``?`` (as
    ``ps`` shows them). Lone surrogates (undecodable bytes from ``os.fsdecode``) cannot be encoded
    to UTF-8 and become U+FFFD. Printable text, ASCII or not, is kept as is.
    """
    if text.isascii() and text.isprintable():
        return text
    out = []
    for ch in text:
        if "\ud800" <= ch <= "\udfff":
            out.append("\ufffd")
        elif unicodedata.category(ch) == "Cc":
            out.append("?")
        else:
            out.append(ch)
    return "".join(out)


def pad_right(text: str, width: int) -> str:
    return text + " " * (width - display_width(text))


def center(text: str, width: int) -> str:
    """Rule 3: centre ``text`` in ``width`` cells; odd slack puts the extra space on the right."""
    slack = width - display_width(text)
    left = slack // 2
    return " " * left + text + " " * (slack - left)


def column_widths(headers: Sequence[Header], groups: Sequence[Group]) -> list[int]:
    """Rule 2: inner width = widest header line or cell of the column, plus 2."""
    widths = [max(display_width(line) for line in header) for header in headers]
    for group in groups:
        for row in group:
            _check_row(row, len(headers))
            for i, cell in enumerate(row):
                widths[i] = max(widths[i], display_width(cell))
    return [w + 2 for w in widths]


def border_line(widths: Sequence[int]) -> str:
    """Rule 1: ``+`` at every column edge, ``-`` across each column's inner width."""
    return "+" + "+".join("-" * w for w in widths) + "+"


def header_lines(headers: Sequence[Header], widths: Sequence[int]) -> list[str]:
    return ["|" + "|".join(center(h[i], w) for h, w in zip(headers, widths, strict=True)) + "|" for i in (0, 1)]


def data_line(row: Row, widths: Sequence[int]) -> str:
    """Rule 4: cells left-aligned after one leading space."""
    return "|" + "|".join(pad_right(" " + cell, w) for cell, w in zip(row, widths, strict=True)) + "|"


def table_lines(headers: Sequence[Header], groups: Sequence[Group]) -> list[str]:
    """All lines of a table (rule 5 layout, rule 7 separators between groups), without newlines.

    Empty groups are skipped. Cells must already be sanitised single-line text.
    """
    groups = [g for g in groups if len(g) > 0]
    widths = column_widths(headers, groups)
    border = border_line(widths)
    lines = [border, *header_lines(headers, widths), border]
    separate = any(len(g) > 1 for g in groups)
    for i, group in enumerate(groups):
        if separate and i > 0:
            lines.append(border)
        lines.extend(data_line(row, widths) for row in group)
    lines.append(border)
    return lines


def render_table(headers: Sequence[Header], groups: Sequence[Group]) -> str:
    """The table as text: lines joined by ``\\n``, no trailing newline."""
    return "\n".join(table_lines(headers, groups))


def group_rows(leading: Row, trailing_rows: Sequence[Row], trailing_width: int) -> list[list[str]]:
    """Rule 6: build one group from the device-level cells and the per-process cells.

    The first process shares the device row; each further process gets a continuation row whose
    device-level cells are blank. Without processes the trailing cells are blank.
    """
    for r in trailing_rows:
        _check_row(r, trailing_width)
    if not trailing_rows:
        return [[*leading, *([""] * trailing_width)]]
    blank = [""] * len(leading)
    return [[*(leading if i == 0 else blank), *r] for i, r in enumerate(trailing_rows)]


def _check_row(row: Row, n: int) -> None:
    if len(row) != n:
        raise ValueError(f"row has {len(row)} cells, expected {n}: {list(row)!r}")
