"""Base of the section widgets: a block of text lines drawn for the current width."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from neurontools.top.model import Sample
from neurontools.top.state import DisplayState


class TextPanel(Widget):
    """Draws ``lines(width)``; its height follows the number of lines."""

    DEFAULT_CSS = """
    TextPanel { height: auto; }
    """
    can_focus = False

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.sample: Sample | None = None
        self.state = DisplayState()

    def show(self, sample: Sample, state: DisplayState) -> None:
        self.sample, self.state = sample, state
        self.refresh(layout=True)

    def lines(self, width: int) -> list[Text]:
        raise NotImplementedError

    def render(self) -> Text:
        return Text("\n").join(self.lines(self.size.width))

    def get_content_height(self, container: object, viewport: object, width: int) -> int:
        return max(len(self.lines(width)), 1)

    @property
    def screen_height(self) -> int:
        return self.app.size.height if self.is_attached else 24
