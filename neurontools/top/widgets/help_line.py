"""The key help line, wrapped onto as many lines as the width needs."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from neurontools.top.widgets.panel import TextPanel

KEYS = (
    ("q", "quit"),
    ("arrows", "move tree selection"),
    ("enter", "expand/collapse tree"),
    ("x", "expand/collapse entire tree"),
    ("a/d", "previous/next tab"),
    ("f", "FLOPS on/off"),
    ("1-9", "select tab"),
    ("e", "engines on/off"),
    ("s", "history on/off"),
    ("p", "processes on/off"),
)
GAP = "  "
# on short screens, when the full help would need several lines: every key on one line
COMPACT = "q:quit  arrows/enter/x:tree  a/d/1-9:tabs  f:FLOPS  e:engines  s:history  p:processes"
SHORT_SCREEN = 30


class HelpLine(TextPanel):
    def key(self) -> Any:
        return self.screen_height

    def lines(self, width: int) -> list[Text]:
        lines = [Text()]
        for key, action in KEYS:
            item = Text(key, "bold") + Text(f": {action}")
            if lines[-1].cell_len and lines[-1].cell_len + len(GAP) + item.cell_len > width:
                lines.append(Text())
            if lines[-1].cell_len:
                lines[-1].append(GAP)
            lines[-1].append_text(item)
        if len(lines) > 1 and self.screen_height < SHORT_SCREEN:
            compact = COMPACT if len(COMPACT) <= width else COMPACT.replace("  ", " ")
            return [Text(compact[:width])]
        return lines
