"""``torch_xla.debug.profiler`` on the emulator (docs/profiling.md §Capturing, docs/run-your-script.md).

- ``Trace(name, **kwargs)``: a context manager; on exit an ``annotation`` event of the system trace
  on track ``framework/TID:<thread id>`` (start, duration, the keyword arguments): in the capture
  directory's ``ntrace.jsonl`` when ``NEURON_RT_INSPECT_ENABLE=1``, and in every trace window
  open. ``StepTrace(name, step_num=...)``: the same, and it ends the step on exit as
  ``xm.mark_step()`` does. An annotation before the process has its device (``xla_device()``)
  goes nowhere.
- ``trace(service_addr, logdir, duration_ms=...)``: records this process's system events for
  ``duration_ms`` (after ``delay_ms``), blocking meanwhile, then writes them as a Kineto-style
  Chrome trace ``logdir/plugins/profile/<run>/<host>_<pid>.pt.trace.json``
  (``emulator/profile/chrome.py``): framework annotations, ``ProfilerStep#N``, executions,
  transfers, compiles and CPU use that fall in the window (an event is delivered when it ends, so
  one still open when the window closes is not in it). ``trace_detached`` does it in a thread;
  ``start_trace(log_dir)`` / ``stop_trace()`` bracket a window by hand.
- ``start_server(port)`` returns a server object but opens no TCP listener: a trace is always of
  the calling process, whatever ``service_addr`` says; a profiling request from another process
  (TensorBoard's capture button, torch_xla's ``capture_profile.py``) is not served.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from emulator import xla as _device
from emulator.compat import world
from emulator.compat import xla_model as xm
from emulator.profile.chrome import write_kineto_trace
from emulator.profile.session import Profiler
from neurontools.contract.profile import SystemEvent

_TRACER_MARKED_STEP = False


def set_tracer_marked_step(value: bool) -> None:
    global _TRACER_MARKED_STEP
    _TRACER_MARKED_STEP = value


def get_tracer_marked_step() -> bool:
    return _TRACER_MARKED_STEP


class ProfilerServer:
    """What ``start_server`` returns (no listener is opened: see the module docstring)."""

    def __init__(self, port: int) -> None:
        self.port = port


_servers: list[ProfilerServer] = []


def start_server(port: int, only_on_master: bool = True) -> ProfilerServer | None:
    if not isinstance(port, int) or not 0 < port < 65536:
        raise RuntimeError(f"profiler server: invalid port {port!r}")
    if only_on_master and not xm.is_master_ordinal():
        return None
    server = ProfilerServer(port)
    _servers.append(server)
    return server


def _profiler() -> Profiler | None:
    runtime = _device.active_runtime()
    return None if runtime is None else runtime.profile.profiler


# -- trace windows --------------------------------------------------------------------------------
class _Window:
    """The system events that overlap ``[begin, end]``, collected as they are delivered."""

    def __init__(self, begin: float, end: float = float("inf")) -> None:
        self.begin, self.end = begin, end
        self.events: list[SystemEvent] = []

    def __call__(self, event: SystemEvent) -> None:
        if event.ts + event.dur >= self.begin and event.ts <= self.end:
            self.events.append(event)


def _write(profiler: Profiler, window: _Window, logdir: str) -> Path:
    profiler.unlisten(window)
    return write_kineto_trace(logdir, list(window.events), profiler.info(), rank=world.global_rank())


def trace(
    service_addr: str,
    logdir: str,
    duration_ms: int = 1000,
    num_tracing_attempts: int = 3,
    host_tracer_level: int = 2,
    device_tracer_level: int = 1,
    delay_ms: int = 0,
    timeout_s: int = 120,
    interval_s: int = 5,
) -> None:
    """Trace this process for ``duration_ms`` ms, blocking; write the window to ``logdir``."""
    if duration_ms <= 0:
        raise ValueError(f"trace: duration_ms must be positive, not {duration_ms}")
    profiler = _device.device_runtime().profile.profiler  # the process's device (attached once)
    begin = time.monotonic() + max(0, delay_ms) / 1e3
    window = _Window(begin, begin + duration_ms / 1e3)
    profiler.listen(window)
    try:
        time.sleep(max(0.0, window.end - time.monotonic()))
    finally:
        _write(profiler, window, logdir)


def trace_detached(
    service_addr: str,
    logdir: str,
    duration_ms: int = 1000,
    num_tracing_attempts: int = 3,
    host_tracer_level: int = 2,
    device_tracer_level: int = 1,
    delay_ms: int = 0,
    timeout_s: int = 120,
    interval_s: int = 5,
) -> None:
    """``trace`` in a background thread: returns at once."""
    kwargs = {"duration_ms": duration_ms, "delay_ms": delay_ms}
    threading.Thread(target=trace, args=(service_addr, logdir), kwargs=kwargs, daemon=True).start()


_manual: tuple[Profiler, _Window, str] | None = None


def start_trace(log_dir: str) -> None:
    """Start a trace window that ``stop_trace`` ends and writes to ``log_dir``."""
    global _manual
    if _manual is not None:
        raise RuntimeError("start_trace: a trace is already running (stop_trace ends it)")
    profiler = _device.device_runtime().profile.profiler
    window = _Window(time.monotonic())
    profiler.listen(window)
    _manual = (profiler, window, log_dir)


def stop_trace() -> None:
    global _manual
    if _manual is None:
        raise RuntimeError("stop_trace: no trace is running (start_trace starts one)")
    (profiler, window, log_dir), _manual = _manual, None
    window.end = time.monotonic()
    _write(profiler, window, log_dir)


# -- annotations ----------------------------------------------------------------------------------
class Trace:
    """An annotation of the framework's timeline: ``with Trace("fwd"): ...``."""

    def __init__(self, name: str, **kwargs: Any) -> None:
        self.name = name
        self.kwargs = kwargs
        self._start = 0.0

    def __enter__(self) -> Trace:
        self._start = time.monotonic()
        return self

    def _annotate(self) -> None:
        profiler = _profiler()
        if profiler is None or not profiler.active:
            return
        end = time.monotonic()
        args = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in self.kwargs.items()}
        track = f"framework/TID:{threading.get_native_id()}"
        profiler.event(SystemEvent("annotation", self.name, self._start, end - self._start, track, None, None, args))

    def __exit__(self, *exc: object) -> None:
        self._annotate()


class StepTrace(Trace):
    """An annotation that ends the step on exit (``xm.mark_step()``): ``StepTrace("train", step_num=i)``."""

    def __enter__(self) -> StepTrace:
        set_tracer_marked_step(True)
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        xm.mark_step()
        self._annotate()
