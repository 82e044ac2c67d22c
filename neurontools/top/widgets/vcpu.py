"""vCPU Utilization rows: the whole host (``vcpu_usage``) and the selected applications
(``neuron_runtime_vcpu_usage``), each a bar (user green, system red) and ``[user%, system%]``."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from neurontools.report.fields import RUNTIME_VCPU, SYSTEM_VCPU
from neurontools.top.formats import fmt_cpu_pair
from neurontools.top.view import runtime_vcpu
from neurontools.top.widgets.drawing import FILLED, NA_STYLE, SYSTEM, bar
from neurontools.top.widgets.panel import TextPanel

LABEL = 20
PAIR = 16  # "[ 2.69%, 3.97%]" and a space; wider for a process using more than one vCPU ("[153.20%, 4.01%]")


class VcpuPanel(TextPanel):
    def key(self) -> Any:
        if self.sample is None:
            return ()
        return (self.sample.system_vcpu, runtime_vcpu(self.sample, self.state.pid))

    def lines(self, width: int) -> list[Text]:
        if self.sample is None:
            return []
        rows = (
            (SYSTEM_VCPU.label, self.sample.system_vcpu),
            (RUNTIME_VCPU.label, runtime_vcpu(self.sample, self.state.pid)),
        )
        figures = [fmt_cpu_pair(*(pair if pair is not None else (None, None))) for _, pair in rows]
        pair_w = max(PAIR, *(len(f) + 1 for f in figures))  # both bars end in the same column
        bar_width = max(width - LABEL - pair_w - 1, 1)
        out = []
        for (label, pair), figure in zip(rows, figures, strict=True):
            user, system = pair if pair is not None else (None, None)
            line = Text(label.ljust(LABEL))
            line.append_text(bar(bar_width, (user, FILLED), (system, SYSTEM)))
            line.append(" " + figure.rjust(pair_w - 1), "" if pair is not None else NA_STYLE)
            out.append(line)
        return out
