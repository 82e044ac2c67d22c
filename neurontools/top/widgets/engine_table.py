"""Per-engine view (key ``e``): busy share, shown as percent, of TensorE, VectorE, ScalarE, GpSimd and DMA per core.

Engine busy times exist only in the daemon snapshot: with neuron-monitor reports as the source
every value is ``NA``. In a process tab, cores the process does not own show 0, like the grid.
"""

from __future__ import annotations

from rich.text import Text

from neurontools.top.formats import NA, fmt_percent
from neurontools.top.model import ENGINE_NAMES
from neurontools.top.view import selected
from neurontools.top.widgets.core_grid import available_rows
from neurontools.top.widgets.drawing import NA_STYLE, GroupLayout, column_groups, join_groups
from neurontools.top.widgets.panel import TextPanel

ROW_LABEL = 10  # "ND15 NC1  "
COLUMN = 9  # " TensorE" / "  45.12%"


def engine_title(sample_version: str) -> str:
    return f"NeuronCore {sample_version} Engine Utilization ({' / '.join(ENGINE_NAMES.values())})"


class EngineTable(TextPanel):
    def lines(self, width: int) -> list[Text]:
        sample, state = self.sample, self.state
        cores = sample.layout if sample is not None else None
        if sample is None or cores is None or not cores.core_count:
            return [Text(f"{NA}: no NeuronCore information from the source yet", NA_STYLE)]
        count = cores.core_count
        apps = selected(sample, state.pid)
        owned: set[int] | None = None
        if state.pid is not None:
            owned = {c for app in apps for c in (app.cores or ())}
        cells = []
        for core in range(count):
            line = Text(f"ND{cores.device_of(core)} NC{cores.local_core(core)}".ljust(ROW_LABEL))
            for engine in ENGINE_NAMES:
                value: float | None
                if sample.engines is None:
                    value = None
                elif owned is not None and core not in owned:
                    value = 0.0
                else:
                    value = sample.engines.get(core, {}).get(engine)
                line.append(fmt_percent(value, COLUMN), "" if value is not None else NA_STYLE)
            cells.append(line)
        layout = column_groups(count, width, available_rows(self.screen_height) - 1, ROW_LABEL + COLUMN * 5)
        header = Text(" " * ROW_LABEL)
        for name in ENGINE_NAMES.values():
            header.append(name.rjust(COLUMN), "bold")
        heads = join_groups([header] * layout.groups, GroupLayout(layout.groups, 1, layout.group_width))
        return heads + join_groups(cells, layout)
