"""Title bar, the source banner and section bars."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from neurontools.top.formats import NA
from neurontools.top.model import Sample
from neurontools.top.state import DisplayState
from neurontools.top.widgets.drawing import BANNER, TITLE, section
from neurontools.top.widgets.panel import TextPanel


def title_text(sample: Sample) -> str:
    """``neuron-top <version> running on <instance-id> (<instance-type>)``."""
    return f"neuron-top {sample.tools_version} running on {sample.instance_id or NA} ({sample.instance_type or NA})"


def core_version(sample: Sample) -> str:
    return sample.neuroncore_version or NA


class TitleBar(TextPanel):
    def key(self) -> Any:
        return title_text(self.sample) if self.sample is not None else "neuron-top"

    def lines(self, width: int) -> list[Text]:
        text = title_text(self.sample) if self.sample is not None else "neuron-top"
        line = Text(text.ljust(width), TITLE)
        line.truncate(width)
        return [line]


class Banner(TextPanel):
    """The source's problem (daemon unreachable, end of input); hidden when there is none."""

    def key(self) -> Any:
        return ("error", self.sample.error if self.sample is not None else None)

    def lines(self, width: int) -> list[Text]:
        error = self.sample.error if self.sample is not None else None
        if not error:
            return []
        line = Text(error, BANNER)
        wrapped = line.wrap(self.app.console, max(width, 1)) if self.is_attached else [line]
        out = []
        for part in wrapped:
            part.pad_right(max(width - part.cell_len, 0))
            part.stylize(BANNER)
            out.append(part)
        return out

    def show(self, sample: Sample, state: DisplayState) -> None:
        self.display = bool(sample.error)
        super().show(sample, state)


class SectionBar(TextPanel):
    """A highlighted section heading; ``text`` may change with the view."""

    def __init__(self, text: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.text = text

    def key(self) -> Any:
        return self.text

    def set_text(self, text: str) -> None:
        if text != self.text:
            self.text = text
            self.redraw()

    def lines(self, width: int) -> list[Text]:
        return [section(self.text, width)]
