"""How the processes of a run stop together (docs/lifecycle.md).

* :func:`stop_on_signals` turns SIGINT, SIGTERM and SIGHUP into :class:`Stopped` in the main
  thread, once: the launcher unwinds, stops what it started and exits ``128 + signal`` (130, 143,
  129). Later signals are ignored while it cleans up, so a second Ctrl-C cannot cut the cleanup short.
* :func:`parent_death_preexec` (in a child before ``exec``) and :func:`die_with_parent` (in a child
  after it started) ask Linux for a signal when the parent dies (``PR_SET_PDEATHSIG``), so even
  ``kill -9`` of a launcher takes its children down. The parent may die before the request takes
  effect; each checks ``getppid()`` afterwards and delivers the signal itself in that case.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
from collections.abc import Callable, Iterator, Mapping
from types import FrameType

from neurontools.cli import handle_signals

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
LAUNCHER_PID_ENV = "NEURON_EMULATOR_LAUNCHER_PID"  # the `neuron-emulator run` process of a job
PR_SET_PDEATHSIG = 1


class Stopped(KeyboardInterrupt):
    """A stop signal arrived; ``status`` is the exit status to return (128 + signal number)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.status = 128 + signum


def exit_status(exc: KeyboardInterrupt) -> int:
    """The exit status for an interrupted run: 128 + the signal (130 for a plain Ctrl-C)."""
    return exc.status if isinstance(exc, Stopped) else 128 + signal.SIGINT


_depth = 0
_stopping = False


def _raise_stopped(signum: int, _frame: FrameType | None) -> None:
    global _stopping
    if _stopping:  # already unwinding: let the cleanup finish
        return
    _stopping = True
    raise Stopped(signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, the first of SIGINT/SIGTERM/SIGHUP raises :class:`Stopped` in the main
    thread; later ones are ignored until the outermost block exits. Outside the main thread (where
    Python cannot install handlers) it does nothing. Handlers are installed and restored by the
    tools' shared :func:`neurontools.cli.handle_signals`."""
    global _depth, _stopping
    installed = False
    try:
        with handle_signals(_raise_stopped, *STOP_SIGNALS) as installed:
            if installed:
                _depth += 1
            yield
    finally:  # after the previous handlers are back, so no signal can raise a second Stopped
        if installed:
            _depth -= 1
            if _depth == 0:
                _stopping = False


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl`` (looked up once, in the parent: a child between fork and exec only calls it)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return None


def set_parent_death_signal(sig: int = signal.SIGTERM) -> bool:
    """Ask for ``sig`` when the parent (the thread that forked this process) dies. False if unsupported."""
    prctl = _prctl()
    return prctl is not None and prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


def parent_death_preexec(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets ``sig`` when this process dies,
    also by SIGKILL. Call it in the parent's main thread (the signal follows the forking thread)."""
    parent = os.getpid()
    _prctl()

    def preexec() -> None:
        set_parent_death_signal(sig)
        if os.getppid() != parent:  # the parent died before the request took effect
            os.kill(os.getpid(), sig)

    return preexec


def _ppid_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            # pid (comm) state ppid ...; comm may contain spaces and parentheses
            return int(fh.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def die_with_parent(sig: int = signal.SIGTERM, *, parent: int | None = None, grandparent: int | None = None) -> None:
    """In a started child: ``sig`` when the parent dies. If it is gone already — the parent is not
    ``parent`` (when given), changed while asking, or its own parent is not ``grandparent`` (when
    given: a torchrun worker checks that torchrun still belongs to the launcher) — deliver ``sig``
    now, as its death would have."""
    before = os.getppid()
    set_parent_death_signal(sig)
    now = os.getppid()
    gone = now != before or (parent is not None and now != parent)
    if not gone and grandparent is not None:
        gone = _ppid_of(now) != grandparent
    if gone:
        os.kill(os.getpid(), sig)


def launcher_pid(env: Mapping[str, str] | None = None) -> int | None:
    """The job's launcher PID from ``NEURON_EMULATOR_LAUNCHER_PID``, if set."""
    value = (os.environ if env is None else env).get(LAUNCHER_PID_ENV, "").strip()
    return int(value) if value.isdigit() else None
