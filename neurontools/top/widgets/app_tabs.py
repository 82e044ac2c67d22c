"""The ``Neuron Apps`` tab bar: ``[1]:all`` and one tab per application; the active one ``>[n]:x<``."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from neurontools.top.view import tabs
from neurontools.top.widgets.drawing import ACTIVE_TAB
from neurontools.top.widgets.panel import TextPanel


class AppTabs(TextPanel):
    def key(self) -> Any:
        apps = self.sample.apps if self.sample is not None else None
        return (self.state.pid, tuple((app.pid, app.tag) for app in apps) if apps is not None else None)

    def lines(self, width: int) -> list[Text]:
        line = Text("Neuron Apps ", "bold")
        if self.sample is None:
            line.append(">[1]:all<", ACTIVE_TAB)
            return [line]
        for tab in tabs(self.sample):
            label = f"[{tab.number}]:{tab.label}"
            line.append(" ")
            if tab.pid == self.state.pid:
                line.append(f">{label}<", ACTIVE_TAB)
            else:
                line.append(f" {label} ")
        line.truncate(width)
        return [line]
