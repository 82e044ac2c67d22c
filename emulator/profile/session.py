"""The per-process profiler: which captures are on, and what each wants (docs/profiling.md §Capturing).

A process has up to two kinds of capture, each a :class:`~emulator.profile.writer.ProcessProfile`
writing ``<output dir>/<instance-id>_pid_<pid>/``:

- the one ``NEURON_RT_INSPECT_*`` asks for (:func:`~neurontools.contract.profile.inspect_settings`),
  on from the first execution to the end of the process;
- one per request the daemon carries in an execution answer (``{"profile": {"id", "steps",
  "output_dir"}}``, what ``neuron-profile capture --pid`` asks of a running process): every execution
  (device mode ``session``) of the next ``steps`` steps, reported finished by :meth:`Profiler.step_ends`.
  A request for the directory the variables already write shares that capture, which then
  profiles every execution of those steps.

Both the real-math executor (``emulator/runtime/executor.py``, through ``emulator/profile/device.py``)
and the replaying ranks use it. :attr:`Profiler.active` is False when nothing is on: the caller
then does no profiling work at all. Framework trace windows (``torch_xla.debug.profiler.trace``,
``emulator/compat/profiler.py``) listen to the system events through :meth:`Profiler.listen`.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from emulator.profile.writer import ProcessProfile
from neurontools.contract.profile import InspectSettings, SystemEvent, TraceInfo, inspect_settings, process_dir_name

Done = tuple[int, list[str], str | None]  # a finished daemon request: (id, capture directories, error)
Listener = Callable[[SystemEvent], None]


@dataclass
class _Request:
    """A capture the daemon asked for: ``steps`` steps from ``first`` on (None: not started)."""

    id: int
    steps: int
    output_dir: str
    first: int | None = None
    capture: ProcessProfile | None = None
    shared: bool = False  # the capture is the variables' own (same directory)
    error: str | None = None

    def last(self) -> int:
        return (self.first or 0) + self.steps - 1


class Profiler:
    """What this process captures; see the module docstring."""

    def __init__(self, env: Mapping[str, str], info: Callable[[], TraceInfo]) -> None:
        self.settings: InspectSettings = inspect_settings(env)  # ValueError: the runtime refuses to start
        self._info_fn = info
        self._info: TraceInfo | None = None
        self._env: ProcessProfile | None = None
        self._requests: list[_Request] = []
        self._seen: set[int] = set()  # request ids taken (the daemon may repeat one until it is done)
        self._listeners: tuple[Listener, ...] = ()
        self._lock = threading.RLock()
        self.active = self.settings.enabled

    def _update(self) -> None:
        self.active = self.settings.enabled or bool(self._requests) or bool(self._listeners)

    # -- who writes ----------------------------------------------------------------------------
    def info(self) -> TraceInfo:
        if self._info is None:
            self._info = self._info_fn()
        return self._info

    def _env_capture(self) -> ProcessProfile | None:
        if self._env is None and self.settings.enabled:
            s = self.settings
            try:
                self._env = ProcessProfile(s, replace(self.info(), device_profile=s.device, system_profile=s.system))
            except OSError as exc:  # one line, and the process trains on without the capture
                print(f"WARN   NRT:nrt_profile capture disabled: {s.output_dir}: {exc.strerror}", file=sys.stderr)
                self.settings = InspectSettings()
                self._update()
        return self._env

    def _captures(self) -> list[ProcessProfile]:
        out: list[ProcessProfile] = []
        env = self._env_capture()
        if env is not None:
            out.append(env)
        out += [r.capture for r in self._requests if r.capture is not None and not r.shared]
        return out

    # -- daemon requests -----------------------------------------------------------------------
    def on_answer(self, answer: Mapping[str, Any]) -> None:
        """Take a profile request from a daemon execution answer (once per id)."""
        request = answer.get("profile") if isinstance(answer, Mapping) else None
        if not isinstance(request, Mapping):
            return
        try:
            rid, steps, output_dir = int(request["id"]), int(request["steps"]), str(request["output_dir"])
        except (KeyError, TypeError, ValueError):
            return
        with self._lock:
            if rid in self._seen:
                return
            self._seen.add(rid)
            pending = _Request(rid, max(1, steps), output_dir)
            if steps < 1 or not output_dir:
                pending.error = f"profile request {rid}: expected steps >= 1 and an output directory"
            self._requests.append(pending)
            self._update()

    def _start(self, request: _Request, first: int) -> None:
        request.first = first
        if request.error is not None:
            return
        directory = Path(request.output_dir).absolute()
        if self.settings.enabled and directory == Path(self.settings.output_dir).absolute():
            request.capture, request.shared = self._env_capture(), True
            return
        settings = InspectSettings(enabled=True, output_dir=str(directory), device="session")
        info = replace(self.info(), device_profile="session", system_profile=True)
        try:
            request.capture = ProcessProfile(settings, info)
        except OSError as exc:
            request.error = f"cannot write {directory / process_dir_name(info.instance_id, info.pid)}: {exc.strerror}"

    def _finish(self, request: _Request, error: str | None = None) -> Done:
        self._requests.remove(request)
        if request.capture is not None and not request.shared:
            request.capture.close()
        dirs = [] if request.capture is None else [str(request.capture.directory)]
        return request.id, dirs, error or request.error

    # -- steps -----------------------------------------------------------------------------------
    def step_begins(self, step: int) -> None:
        """Requests taken between steps start with this one."""
        with self._lock:
            for request in self._requests:
                if request.first is None:
                    self._start(request, step)

    def step_ends(self, step: int) -> list[Done]:
        """The daemon requests finished with ``step``; requests taken during it start with the next."""
        with self._lock:
            done = [self._finish(r) for r in list(self._requests) if r.first is not None and r.last() <= step]
            for request in self._requests:
                if request.first is None:
                    self._start(request, step + 1)
            self._update()
            return done

    # -- what is written -------------------------------------------------------------------------
    def targets(self, graph_hash: str, core: int) -> list[ProcessProfile]:
        """The captures that want this execution's device profile: the variables' (``model``: the
        first execution of each graph on each core; ``session``: all; not for a filtered-out
        core) and every running request's (all, unfiltered)."""
        with self._lock:
            out = [c for c in self._captures() if c.wants_device(graph_hash, core)]
            env = self._env
            shared = any(r.shared and r.first is not None for r in self._requests)
            if shared and env is not None and env not in out and env.settings.keeps(core):
                out.append(env)
            return out

    def event(self, event: SystemEvent) -> None:
        """A system-trace event, to every capture (each applies its own filter and budget) and
        every listener."""
        with self._lock:
            for capture in self._captures():
                capture.add_event(event)
            for listener in self._listeners:
                listener(event)

    def listen(self, listener: Listener) -> None:
        with self._lock:
            self._listeners = (*self._listeners, listener)
            self._update()

    def unlisten(self, listener: Listener) -> None:
        with self._lock:
            self._listeners = tuple(x for x in self._listeners if x is not listener)
            self._update()

    def abandon(self) -> list[Done]:
        """The daemon requests still open (the process is ending): finished, with an error."""
        with self._lock:
            return [
                self._finish(r, f"the process ended before the {r.steps} requested steps were captured")
                for r in list(self._requests)
            ]

    def close(self) -> None:
        with self._lock:
            for request in self._requests:
                if request.capture is not None and not request.shared:
                    request.capture.close()
            if self._env is not None:
                self._env.close()
