"""Running a command under the profiler (docs/profiling.md): ``inspect`` starts the user's command
with the runtime's capture variables set; ``capture -n GRAPH`` starts ``neuron-emulator
profile-graph``. The child dies with the tool: SIGINT and SIGTERM are forwarded to it, it is
killed if the tool leaves first, and on Linux it gets SIGTERM when the tool dies any other way
(even SIGKILL: ``PR_SET_PDEATHSIG``). The tool exits with the child's status."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType

from neurontools.cli import CliError, handle_signals

EMULATOR = "neuron-emulator"
KILL_WAIT = 5.0  # seconds a child has to go after the forwarded signal, before SIGKILL


def inspect_env(base: Mapping[str, str], output_dir: str, max_events: int | None, device: str | None) -> dict[str, str]:
    """``base`` with the runtime's capture variables (docs/profiling.md §Files)."""
    env = dict(base)
    env["NEURON_RT_INSPECT_ENABLE"] = "1"
    env["NEURON_RT_INSPECT_OUTPUT_DIR"] = str(Path(output_dir).resolve())
    if max_events is not None:
        env["NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC"] = str(max_events)
    if device is not None:
        env["NEURON_RT_INSPECT_DEVICE_PROFILE"] = device
    return env


def emulator_command() -> str:
    """``neuron-emulator`` on PATH, else beside this Python (a venv's bin); one line if neither."""
    found = shutil.which(EMULATOR)
    if found:
        return found
    beside = Path(sys.executable).parent / EMULATOR
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    raise CliError(
        f"{EMULATOR} is not installed (not on PATH nor beside {sys.executable}); install neurontools[emulator]"
    )


PR_SET_PDEATHSIG = 1


def _death_signal() -> Callable[[], None] | None:
    """What the child runs before exec to get SIGTERM when the tool dies (Linux's prctl, looked up
    here in the parent: between fork and exec the child only calls it); None elsewhere."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def run_child(argv: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """Run ``argv`` to its end and return its exit status (128 + N when a signal N ended it)."""
    try:
        child = subprocess.Popen(list(argv), env=None if env is None else dict(env), preexec_fn=_death_signal())
    except OSError as exc:
        raise CliError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None

    def forward(signum: int, frame: FrameType | None) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    try:
        with handle_signals(forward, signal.SIGINT, signal.SIGTERM):
            status = child.wait()
    finally:
        _reap(child)
    return 128 - status if status < 0 else status


def _reap(child: subprocess.Popen[bytes]) -> None:
    """The child does not outlive the tool: terminate it, then kill it if it lingers."""
    if child.poll() is not None:
        return
    child.terminate()
    try:
        child.wait(KILL_WAIT)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
