"""Base of the section widgets: a block of text lines drawn for the current width.

Drawing is line by line (Textual's line API): a new sample is compared with the lines on screen
and only the lines that changed are rendered again and repainted (one repaint request per panel);
the screen is laid out again only when a block's height changes. Most of a neuron-top screen is
the same from one second to the next, so this is what keeps its CPU use low. A panel that can say
cheaply what its lines are made from (``key``) is not even asked for new lines while that stays
equal: with a 32-process job most sections are made from the same figures second after second.
The widget's own style (a walk up the DOM) is worked out once per repaint, not once per line:
like Textual's own style caches, it is dropped whenever the widget is refreshed or its styles
change.
"""

from __future__ import annotations

from typing import Any, Self

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from neurontools.top.model import Sample
from neurontools.top.state import DisplayState

_UNKNOWN = object()  # no key yet: make the lines


def _same(a: Text, b: Text) -> bool:
    """Whether two lines draw the same (``Text.__eq__`` ignores the base style)."""
    return a.plain == b.plain and a.style == b.style and a.spans == b.spans


def _runs(rows: list[int], width: int) -> list[Region]:
    """The ascending ``rows`` as regions ``width`` wide, adjacent rows joined."""
    regions: list[Region] = []
    start = previous = rows[0]
    for y in rows[1:]:
        if y != previous + 1:
            regions.append(Region(0, start, width, previous - start + 1))
            start = y
        previous = y
    regions.append(Region(0, start, width, previous - start + 1))
    return regions


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
        self._base_style: Style | None = None  # ``rich_style``, until the next refresh
        self._key: Any = _UNKNOWN  # ``key()`` when ``_text`` was made
        self.lines_made = 0  # calls of ``lines`` (tests count them)

    def show(self, sample: Sample, state: DisplayState) -> None:
        self.sample, self.state = sample, state
        self._update()

    def redraw(self) -> None:
        """The widget's own state changed (e.g. tree navigation): draw again, size may change."""
        self._key = _UNKNOWN
        self._update()

    def key(self) -> Any:
        """Everything ``lines(width)`` is made from besides the width, when a panel can tell it
        for much less than making the lines: equal keys, equal lines. None (the default): the
        lines are made again every time."""
        return None

    def _make(self, width: int) -> list[Text]:
        lines = self.lines(width)
        self._key = self.key()  # after: making the lines may settle the panel's own state (the tree's window)
        self.lines_made += 1
        return lines

    def _update(self) -> None:
        width = self.size.width
        if not width:  # hidden, or not laid out yet: the layout that shows it makes the lines
            self._width = -1
            return
        if width != self._width:  # resized: lines come at render time
            self._width = -1
            self.refresh(layout=True)
            return
        if self._key is not None and self._key is not _UNKNOWN and self.key() == self._key:
            return  # made from the same as the lines on screen
        old, new = self._text, self._make(width)
        self._text = new
        if len(new) != len(old):
            self._strips = [None] * len(new)
            self.refresh(layout=True)
            return
        changed = [y for y, (before, after) in enumerate(zip(old, new, strict=True)) if not _same(before, after)]
        for y in changed:
            self._strips[y] = None
        if changed:  # one repaint request: a run of adjacent changed lines is one region
            self.refresh(*_runs(changed, width))

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False, recompose: bool = False) -> Self:
        if repaint:
            self._base_style = None
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def notify_style_update(self) -> None:
        self._base_style = None
        super().notify_style_update()

    def on_resize(self) -> None:
        # lines may depend on the height too (the tree's window): make them again
        self._width, self._key = -1, _UNKNOWN

    def lines(self, width: int) -> list[Text]:
        raise NotImplementedError

    def _lines(self, width: int) -> list[Text]:
        if width != self._width:
            self._width, self._text = width, self._make(width)
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
            base = self._base_style
            if base is None:
                base = self._base_style = self.rich_style
            line, console = lines[y], self.app.console
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
