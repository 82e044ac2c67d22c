"""Process panel (key ``p``): PID, tag, command, NeuronCores, steps/s and compile-cache hits.

Steps/s are the executions that finished during the report's period (``execution_stats``); the
command and the compile cache come from the daemon snapshot only (``NA`` with reports as source).
"""

from __future__ import annotations

from rich.text import Text

from neurontools.report.fields import COMPILE_CACHE_HITS, STEPS_PER_SECOND
from neurontools.top.formats import NA, fmt_core_list, fmt_count, fmt_rate
from neurontools.top.widgets.drawing import SECTION, SELECTED_ROW, fit
from neurontools.top.widgets.panel import TextPanel

# (heading, width; 0 = the rest), right-aligned?
COLUMNS: tuple[tuple[str, int, bool], ...] = (
    ("PID", 8, True),
    ("Tag", 14, False),
    ("Command", 0, False),
    ("Cores", 8, False),
)
COLUMNS += ((STEPS_PER_SECOND.label, 9, True), (COMPILE_CACHE_HITS.label, 11, True))
TITLE = "Neuron Processes"


def _widths(width: int) -> list[int]:
    fixed = sum(w for _, w, _ in COLUMNS) + len(COLUMNS)
    return [w or max(width - fixed, 8) for _, w, _ in COLUMNS]


def _cells(values: list[str], widths: list[int]) -> str:
    out = []
    for (_, _, right), value, w in zip(COLUMNS, values, widths, strict=True):
        out.append(value.rjust(w) if right and len(value) <= w else fit(value, w))
    return " ".join(out) + " "


class ProcessPanel(TextPanel):
    DEFAULT_CSS = """
    ProcessPanel { height: 1fr; min-height: 3; }
    """

    def lines(self, width: int) -> list[Text]:
        widths = _widths(width)
        lines = [Text(fit(TITLE, width), SECTION), Text(fit(_cells([c for c, _, _ in COLUMNS], widths), width), "bold")]
        if self.sample is None:
            return lines
        if not self.sample.apps:
            lines.append(Text("no Neuron application is running", "dim"))
        for app in self.sample.apps:
            values = [
                str(app.pid),
                app.tag,
                app.command if app.command is not None else NA,
                fmt_core_list(app.cores),
                fmt_rate(app.steps_per_second),
                fmt_count(app.compile_hits),
            ]
            line = Text(fit(_cells(values, widths), width))
            if app.pid == self.state.pid:
                line.stylize(SELECTED_ROW)
            lines.append(line)
        return lines
