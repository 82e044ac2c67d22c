"""Stop signals turned into a clean exit: no traceback, the tool's own exit status.

:func:`stop_signals` makes the first of the given signals raise :class:`Terminated` in the main
thread, so the command unwinds through its ``finally`` blocks (unregistering from the daemon,
closing its server); later ones are ignored while it cleans up. SIGINT not given keeps Python's
KeyboardInterrupt; catch :data:`STOPPED` for both. Python installs handlers in the main thread
only: elsewhere (a test running ``main`` in a thread) these do nothing.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

Handler = Callable[[int, FrameType | None], object]


class Terminated(Exception):
    """A stop signal arrived; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


STOPPED = (KeyboardInterrupt, Terminated)


def stopped_status(exc: BaseException) -> int:
    """The shell's status for a command stopped by a signal: 128 + the signal (130 for Ctrl-C)."""
    return 128 + (exc.signum if isinstance(exc, Terminated) else signal.SIGINT)


@contextlib.contextmanager
def handle_signals(handler: Handler, *signums: int) -> Iterator[bool]:
    """``handler`` for ``signums`` within the block, the previous handlers after it. Yields whether
    the handlers were installed (only in the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous = {signum: signal.signal(signum, handler) for signum in signums}
    try:
        yield True
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


class StopGuard:
    """Raises :class:`Terminated` on the first signal, ignores the later ones (and all of them
    after :meth:`hold`: a shutdown that a second Ctrl-C must not cut short)."""

    def __init__(self) -> None:
        self.stopping = False

    def hold(self) -> None:
        self.stopping = True

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:
            return
        self.stopping = True
        raise Terminated(signum)


@contextlib.contextmanager
def stop_signals(*signums: int) -> Iterator[StopGuard]:
    """Within the block, the first of ``signums`` (default SIGTERM) raises :class:`Terminated`."""
    guard = StopGuard()
    with handle_signals(guard, *(signums or (signal.SIGTERM,))):
        yield guard
