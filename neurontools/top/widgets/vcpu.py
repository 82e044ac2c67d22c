"""vCPU Utilization rows: the whole host (``vcpu_usage``) and the selected applications
(``neuron_runtime_vcpu_usage``), each a bar (user green, system red) and ``[user%, system%]``."""

from __future__ import annotations

from rich.text import Text

from neurontools.top.formats import fmt_cpu_pair
from neurontools.top.view import runtime_vcpu
from neurontools.top.widgets.drawing import FILLED, NA_STYLE, SYSTEM, bar
from neurontools.top.widgets.panel import TextPanel

LABEL = 20
PAIR = 16  # "[ 2.69%, 3.97%]" and a space


class VcpuPanel(TextPanel):
    def lines(self, width: int) -> list[Text]:
        if self.sample is None:
            return []
        rows = (
            ("System vCPU Usage", self.sample.system_vcpu),
            ("Runtime vCPU Usage", runtime_vcpu(self.sample, self.state.pid)),
        )
        bar_width = max(width - LABEL - PAIR - 1, 1)
        out = []
        for label, pair in rows:
            user, system = pair if pair is not None else (None, None)
            line = Text(label.ljust(LABEL))
            line.append_text(bar(bar_width, (user, FILLED), (system, SYSTEM)))
            line.append(" " + fmt_cpu_pair(user, system), "" if pair is not None else NA_STYLE)
            out.append(line)
        return out
