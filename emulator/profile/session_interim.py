"""INTERIM stand-in for ``emulator.profile.session.Profiler`` (being built on branch wt-capture).

Same interface — ``Profiler(env, info)``, ``active``, ``on_answer``, ``step_begins``, ``targets``,
``event``, ``step_ends``, ``close`` — so that the replay ranks (``emulator/parallel/rank_profile.py``)
switch to the real one by changing one import. What it does: ``NEURON_RT_INSPECT_*`` capture for
the whole run (the runtime's variables), and a daemon's request (an execution answer's
``"profile"`` directive: docs/profiling.md §Profiling a running process) for ``steps`` steps from
the next step on, every execution profiled (``session``), into the directive's output directory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from emulator.profile.writer import ProcessProfile
from neurontools.contract.profile import InspectSettings, SystemEvent, TraceInfo, inspect_settings

Finished = tuple[int, list[str], str | None]  # request id, capture directories, error


@dataclass
class _Request:
    id: int
    steps: int
    first: int  # the step the capture began
    profile: ProcessProfile


class Profiler:
    """A process's profiling: the runtime's variables, and the daemon's requests."""

    def __init__(self, env: Mapping[str, str], info: Callable[[], TraceInfo]) -> None:
        self.settings = inspect_settings(env)  # ValueError: a value the runtime would refuse
        self._info = info
        self._run: ProcessProfile | None = None
        self._pending: dict[str, Any] | None = None
        self._request: _Request | None = None
        self._finished: list[Finished] = []

    @property
    def active(self) -> bool:
        """Is anything captured (or about to be)?"""
        return self.settings.enabled or self._pending is not None or self._request is not None

    def on_answer(self, answer: Mapping[str, Any]) -> None:
        """Keep the daemon's profile directive, if the answer carries one."""
        directive = answer.get("profile")
        if isinstance(directive, dict):
            self._pending = directive

    def step_begins(self, step: int) -> None:
        """A pending request starts capturing with this step."""
        directive, self._pending = self._pending, None
        if directive is None or self._request is not None:
            return
        settings = InspectSettings(enabled=True, output_dir=str(directive["output_dir"]), device="session")
        try:
            info = dataclasses.replace(self._info(), device_profile="session", system_profile=True)
            profile = ProcessProfile(settings, info)
        except OSError as exc:
            self._finished.append((int(directive["id"]), [], f"cannot write {directive['output_dir']}: {exc}"))
            return
        self._request = _Request(int(directive["id"]), int(directive["steps"]), step, profile)

    def _run_profile(self) -> ProcessProfile | None:
        if self.settings.enabled and self._run is None:
            info = self._info()
            self._run = ProcessProfile(self.settings, info)
        return self._run

    def profiles(self) -> list[ProcessProfile]:
        """The capture directories being written."""
        run = self._run_profile()
        return [p for p in (run, self._request.profile if self._request else None) if p is not None]

    def targets(self, graph_hash: str, core: int) -> list[ProcessProfile]:
        """The profiles that want this execution of ``graph_hash`` on ``core`` in a device profile."""
        return [p for p in self.profiles() if p.wants_device(graph_hash, core)]

    def event(self, event: SystemEvent) -> None:
        for profile in self.profiles():
            profile.add_event(event)

    def step_ends(self, step: int) -> list[Finished]:
        """The requests finished with this step."""
        finished, self._finished = self._finished, []
        request = self._request
        if request is not None and step >= request.first + request.steps - 1:
            request.profile.close()
            finished.append((request.id, [str(request.profile.directory)], None))
            self._request = None
        return finished

    def close(self) -> None:
        for profile in self.profiles():
            profile.close()
        self._run = self._request = None
