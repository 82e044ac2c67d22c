"""Base of the section widgets: a block of text lines drawn for the current width.

Drawing is line by line (Textual's line API): a new sample is compared with the lines on screen
and only the lines that changed are rendered again and repainted; the screen is laid out again
only when a block's height changes. Most of a neuron-top screen is the same from one second to
the next, so this is what keeps its CPU use low.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from neurontools.top.model import Sample
from neurontools.top.state import DisplayState


def _same(a: Text, b: Text) -> bool:
    """Whether two lines draw the same (``Text.__eq__`` ignores the base style)."""
    return a.plain == b.plain and a.style == b.style and a.spans == b.spans


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
        self._width = -1  # the width ``_text`` was made for; -1: nothing made yet
        self._text: list[Text] = []
        self._strips: list[Strip | None] = []  # rendered lines, None until drawn

    def show(self, sample: Sample, state: DisplayState) -> None:
        self.sample, self.state = sample, state
        self._update()

    def redraw(self) -> None:
        """The widget's own state changed (e.g. tree navigation): draw again, size may change."""
        self._update()

    def _update(self) -> None:
        width = self.size.width
        if not width:  # hidden, or not laid out yet: the layout that shows it makes the lines
            self._width = -1
            return
        if width != self._width:  # resized: lines come at render time
            self._width = -1
            self.refresh(layout=True)
            return
        old, new = self._text, self.lines(width)
        self._text = new
        if len(new) != len(old):
            self._strips = [None] * len(new)
            self.refresh(layout=True)
            return
        for y, (before, after) in enumerate(zip(old, new, strict=True)):
            if not _same(before, after):
                self._strips[y] = None
                self.refresh(Region(0, y, width, 1))

    def on_resize(self) -> None:
        self._width = -1  # lines may depend on the height too (the tree's window): make them again

    def lines(self, width: int) -> list[Text]:
        raise NotImplementedError

    def _lines(self, width: int) -> list[Text]:
        if width != self._width:
            self._width, self._text = width, self.lines(width)
            self._strips = [None] * len(self._text)
        return self._text

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        lines = self._lines(width)
        if y >= len(lines):
            return Strip.blank(width, self.rich_style)
        strip = self._strips[y]
        if strip is None:
            # Rich renders the line straight to segments (Textual's own content pipeline costs
            # several times more per line); the widget's style goes beneath the line's own
            line, console, base = lines[y], self.app.console, self.rich_style
            # (Text.render leaves out the line's base style when it has no spans: apply it here)
            style = base + console.get_style(line.style) if line.style else base
            strip = Strip(Segment.apply_style(line.render(console), style)).crop_extend(0, width, base)
            self._strips[y] = strip
        return strip

    def get_content_height(self, container: object, viewport: object, width: int) -> int:
        return max(len(self._lines(width)), 1)

    @property
    def screen_height(self) -> int:
        return self.app.size.height if self.is_attached else 24
