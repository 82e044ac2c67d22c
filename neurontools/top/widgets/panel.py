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
        self._cache: tuple[int, list[Text]] | None = None  # (width, lines) of the current sample

    def show(self, sample: Sample, state: DisplayState) -> None:
        old_height = len(self._cache[1]) if self._cache is not None else -1
        self.sample, self.state, self._cache = sample, state, None
        # a relayout of the whole screen costs far more than redrawing this block: only ask for
        # one when the block's height changes
        same_height = old_height == len(self._lines(self.size.width)) if self.size.width else False
        self.refresh(layout=not same_height)

    def redraw(self) -> None:
        """The widget's own state changed (e.g. tree navigation): draw again, size may change."""
        self._cache = None
        self.refresh(layout=True)

    def lines(self, width: int) -> list[Text]:
        raise NotImplementedError

    def _lines(self, width: int) -> list[Text]:
        if self._cache is None or self._cache[0] != width:
            self._cache = (width, self.lines(width))
        return self._cache[1]

    def render(self) -> Text:
        return Text("\n").join(self._lines(self.size.width))

    def get_content_height(self, container: object, viewport: object, width: int) -> int:
        return max(len(self._lines(width)), 1)

    @property
    def screen_height(self) -> int:
        return self.app.size.height if self.is_attached else 24
