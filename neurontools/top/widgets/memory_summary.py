"""Memory Usage Summary: host and device memory of the selected applications, every category."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from neurontools.report.fields import APP_DEVICE_MEMORY, APP_HOST_MEMORY
from neurontools.top.formats import fmt_bytes
from neurontools.top.view import device_memory, host_memory
from neurontools.top.widgets.panel import TextPanel

LABEL = 20
GAP = "  "


def _row(label: str, items: list[tuple[str, int | None]], width: int) -> list[Text]:
    """``label`` then ``Name: value`` items, continued on indented lines when the width is short."""
    lines = [Text(label.ljust(LABEL), "bold")]
    for i, (name, value) in enumerate(items):
        item = Text(f"{name}: ", "bold") + Text(fmt_bytes(value), "" if value is not None else "dim")
        sep = GAP if i else ""
        if lines[-1].cell_len + len(sep) + item.cell_len > width and lines[-1].cell_len > LABEL:
            lines.append(Text(" " * LABEL))
            sep = ""
        lines[-1].append(sep)
        lines[-1].append_text(item)
    return lines


class MemorySummary(TextPanel):
    def key(self) -> Any:
        if self.sample is None:
            return ()
        return (host_memory(self.sample, self.state.pid), device_memory(self.sample, self.state.pid))

    def lines(self, width: int) -> list[Text]:
        if self.sample is None:
            return []
        pid = self.state.pid
        return [
            *_row(APP_HOST_MEMORY.label, host_memory(self.sample, pid), width),
            *_row(APP_DEVICE_MEMORY.label, device_memory(self.sample, pid), width),
        ]
