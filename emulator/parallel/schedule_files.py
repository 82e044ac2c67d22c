"""The schedule files ("NEFFs") of a planned job's graphs, for the ranks' profiles (docs/profiling.md).

The tracer builds each graph's :class:`~neurontools.contract.profile.GraphSchedule` in memory
(``tracer.py``: about 2 % of the tracing time); writing one is a gzip JSON file (a GPT3-6.7B
TP8xDP4 stage: four graphs, 107 kB, about 0.1 s). The launcher writes them next to the job plan
only when a rank may profile: before the ranks start when ``NEURON_RT_INSPECT_ENABLE=1`` (every
rank profiles from its first step), else when a rank first asks (its step line ``step N END profile``
on stdout: the daemon asked it to profile, docs/profiling.md §Profiling a running process), in a
thread so the lockstep goes on. The ranks copy a graph's file into their capture directory when it is there
(``rank_profile.py``); they never import torch or build a schedule themselves.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from neurontools.contract.profile import GraphSchedule, neff_file, write_graph

if TYPE_CHECKING:
    from emulator.parallel.job import JobPlan

PROFILE_REQUEST = "profile"  # after a rank's ``step N END``: write its stages' schedule files


class ScheduleFiles:
    """Writes each stage's schedule files into ``directory`` once, on the first call for it."""

    def __init__(self, plan: JobPlan, directory: Path) -> None:
        self.directory = directory
        self._stages: dict[int, list[GraphSchedule]] = {
            s: [g.schedule for g in cost.program.graphs.values() if g.schedule is not None]
            for s, cost in plan.stages.items()
        }
        self._written: set[int] = set()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def write(self, stages: set[int]) -> None:
        """Write the files of ``stages`` (those not written yet), now."""
        with self._lock:
            todo = sorted(stages - self._written)
            self._written.update(todo)
        if not todo:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        for stage in todo:
            for graph in self._stages.get(stage, ()):
                path = self.directory / neff_file(graph.hash)
                if not path.exists():  # stages of one program share graphs
                    write_graph(path, graph)  # atomic: a rank never copies half of one

    def request(self, stages: set[int]) -> None:
        """Write the files of ``stages`` in a thread (a rank asked: the lockstep goes on)."""
        with self._lock:
            if stages <= self._written:
                return
        thread = threading.Thread(target=self.write, args=(stages,), name="schedule-files", daemon=True)
        thread.start()
        self._threads.append(thread)

    def join(self, timeout: float = 10.0) -> None:
        for thread in self._threads:
            thread.join(timeout)
