"""The NeuronCore grid: one row per device (``ND0``...), one cell per core (``NC0``, ``NC1``).

A cell is a bar (or, in history mode, a sparkline of the last samples) and a label: ``[69.89%]``,
or ``[ 10.004TF]`` in FLOPS mode. The last column shows each device's HBM used / capacity when
the width allows. Large instances are laid out in side-by-side column groups when that keeps
every device on screen.
"""

from __future__ import annotations

import math

from rich.text import Text

from neurontools.top.formats import (
    NA,
    fmt_avg_percent,
    fmt_avg_total_tflops,
    fmt_bytes,
    fmt_percent_cell,
    fmt_tflops_cell,
)
from neurontools.top.model import Sample
from neurontools.top.state import DisplayState
from neurontools.top.view import CoreValue, average, core_values, hbm_used, total
from neurontools.top.widgets.drawing import (
    FILLED,
    MIN_BAR,
    NA_STYLE,
    GroupLayout,
    LineBuilder,
    append_bar,
    column_groups,
    join_groups,
    sparkline,
)
from neurontools.top.widgets.header import core_version
from neurontools.top.widgets.panel import TextPanel

LABEL = 5  # "ND15 "
HBM = 18  # "  1023.9MB/32.0GB "


def grid_title(sample: Sample, state: DisplayState) -> str:
    """``NeuronCore v2 Utilization (Avg: 71.19%)`` or ``(Avg:    9.946TF | Total:  318.278TF)``."""
    values = core_values(sample, state.pid, sample.core_count or 0)
    if state.flops:
        flops = [v.flops for v in values]
        figures = fmt_avg_total_tflops(average(flops), total(flops))
    else:
        figures = fmt_avg_percent(average([v.utilization for v in values]))
    return f"NeuronCore {core_version(sample)} Utilization ({figures})"


def available_rows(screen_height: int) -> int:
    """Grid rows that leave room for the other sections."""
    return max(2, screen_height // 2 - 2)


class CoreGrid(TextPanel):
    def _cell(
        self, line: LineBuilder, value: CoreValue, history: tuple[float | None, ...], bar_width: int, label_w: int
    ) -> None:
        """Append one core's cell to ``line`` (straight into it: 32 cells are drawn every second)."""
        state = self.state
        label = fmt_tflops_cell(value.flops) if state.flops else fmt_percent_cell(value.utilization)
        # a wider label ("[100.00%]") takes its room from the bar, so the columns stay aligned
        width = max(bar_width - max(len(label) - label_w, 0), 1)
        if state.history:
            line.append_text(sparkline(history, width))
        else:
            append_bar(line, width, (value.utilization, FILLED))
        known = value.flops if state.flops else value.utilization
        line.append(" ")
        line.append(label, None if known is not None else NA_STYLE)
        line.append(" ")

    def lines(self, width: int) -> list[Text]:
        sample, state = self.sample, self.state
        if sample is None or not sample.core_count or not sample.cores_per_device or not sample.device_count:
            return [Text(f"{NA}: no NeuronCore information from the source yet", NA_STYLE)]
        per, devices = sample.cores_per_device, sample.device_count
        sample_layout = sample.layout
        assert sample_layout is not None  # both counts are known here
        label_w = 11 if state.flops else 8
        cell_fixed = 1 + label_w + 1
        rows = available_rows(self.screen_height) - 1
        wanted = min(math.ceil(devices / max(rows, 1)), devices)
        min_hbm = LABEL + per * (MIN_BAR + cell_fixed) + HBM
        layout, with_hbm = column_groups(devices, width, rows, min_hbm), True
        if layout.groups < wanted:  # drop the HBM column if that keeps every device on screen
            plain = column_groups(devices, width, rows, min_hbm - HBM)
            if plain.groups > layout.groups:
                layout, with_hbm = plain, False
        with_hbm = with_hbm and layout.group_width >= min_hbm
        hbm_w = HBM if with_hbm else 0
        bar_width = max((layout.group_width - LABEL - hbm_w) // per - cell_fixed, 1)
        values = core_values(sample, state.pid, sample.core_count)
        used = hbm_used(sample, state.pid)
        cells = []
        for device in range(devices):
            line = LineBuilder(f"ND{device}".ljust(LABEL))
            for local in range(per):
                core = sample_layout.core_id(device, local)
                history = sample.history.get((state.pid, core), ()) if state.history else ()
                self._cell(line, values[core], history, bar_width, label_w)
            if with_hbm:
                cap = fmt_bytes(sample.device_memory_size)
                line.append(f" {fmt_bytes(used[device]):>9}/{cap:<7}")
            cells.append(line.text())
        header = Text(" " * LABEL)
        for local in range(per):
            header.append(f"NC{local}".ljust(bar_width + cell_fixed), "bold")
        if with_hbm:
            header.append(" HBM used/capacity"[:hbm_w], "bold")
        heads = join_groups([header] * layout.groups, GroupLayout(layout.groups, 1, layout.group_width))
        return heads + join_groups(cells, layout)
