"""One process's capture directory: ``<output dir>/<instance-id>_pid_<pid>/`` (docs/profiling.md).

The runtime's choices (``NEURON_RT_INSPECT_*``, :class:`~neurontools.contract.profile.InspectSettings`):
``model`` profiles the first execution of each graph on each core, ``session`` every one; the
system trace keeps at most ``max_events_per_nc`` events per NeuronCore; the core filter drops the
other cores' events. Every line is flushed as written: a process killed mid-run leaves a readable
profile (the reader ignores a torn last line).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import IO

from neurontools.contract.profile import (
    SYSTEM_TRACE,
    TRACE_INFO,
    DeviceProfileHeader,
    GraphSchedule,
    InspectSettings,
    ProfiledExecution,
    SystemEvent,
    TraceInfo,
    json_line,
    neff_file,
    ntff_file,
    process_dir_name,
    write_graph,
)


class ProcessProfile:
    """Writes one process's capture directory as its executions happen."""

    def __init__(self, settings: InspectSettings, info: TraceInfo) -> None:
        self.settings = settings
        self.info = info
        self.directory = Path(settings.output_dir).absolute() / process_dir_name(info.instance_id, info.pid)
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / TRACE_INFO).write_text(json.dumps(asdict(info), indent=1))
        self._graphs: set[str] = set()
        self._device: dict[tuple[str, int], IO[str]] = {}
        self._events: dict[int, int] = {}  # core (-1: none) -> system events kept
        self._trace: IO[str] | None = None

    # -- device profiles ---------------------------------------------------------------------------
    def add_graph(self, graph: GraphSchedule) -> None:
        """The graph's schedule file, once per process."""
        if graph.hash not in self._graphs:
            write_graph(self.directory / neff_file(graph.hash), graph)
            self._graphs.add(graph.hash)

    def has_graph(self, graph_hash: str) -> bool:
        return graph_hash in self._graphs

    def wants_device(self, graph_hash: str, core: int) -> bool:
        """Is the next execution of ``graph_hash`` on ``core`` to be profiled?"""
        s = self.settings
        if s.device == "off" or not s.keeps(core):
            return False
        return s.device == "session" or (graph_hash, core) not in self._device

    def add_execution(self, header: DeviceProfileHeader, execution: ProfiledExecution) -> None:
        """Append a profiled execution to its core's device profile (the header first)."""
        key = (header.graph_hash, header.core)
        out = self._device.get(key)
        if out is None:
            out = self._device[key] = open(self.directory / ntff_file(*key), "a", encoding="utf-8")  # noqa: SIM115
            out.write(json_line(header))
        out.write(json_line(execution))
        out.flush()

    # -- the system trace ----------------------------------------------------------------------------
    def add_event(self, event: SystemEvent) -> None:
        """Append a system-trace event, within the per-core budget and the core filter."""
        s = self.settings
        if not s.system or (event.core is not None and not s.keeps(event.core)):
            return
        key = -1 if event.core is None else event.core
        kept = self._events.get(key, 0)
        if kept >= s.max_events_per_nc:
            return
        self._events[key] = kept + 1
        if self._trace is None:
            self._trace = open(self.directory / SYSTEM_TRACE, "a", encoding="utf-8")  # noqa: SIM115
        self._trace.write(json_line(event))
        self._trace.flush()

    def close(self) -> None:
        for out in self._device.values():
            out.close()
        self._device.clear()
        if self._trace is not None:
            self._trace.close()
            self._trace = None
