"""A terminal driver whose input thread sleeps until there is input.

Textual's ``LinuxDriver`` wakes its input thread ten times a second to give the key parser a
chance to time out a lone Escape. For a screen that changes once a second that polling is most
of the idle CPU (measured: 0.17 % of a core for an idle Textual app, 0.00 % without it). This
driver keeps the short ticks only for a while after input arrived (the parser can only be
waiting on a partial key sequence then) and otherwise blocks until a key or a stop request:
stopping writes to a pipe the thread also waits on.

It reuses Textual's xterm key parser (``textual._xterm_parser``, private; textual is pinned to a
minor version in pyproject.toml for this reason).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import threading
import time
from codecs import getincrementaldecoder
from typing import Any

from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver

TICK = 0.1  # seconds between parser ticks while a key sequence may be incomplete (Textual's own)
TICKING_AFTER_INPUT = 1.0  # how long after the last input the parser keeps being ticked


class WakingEvent(threading.Event):
    """An event that also makes a pipe readable while set, so a ``select`` can wait on it."""

    def __init__(self) -> None:
        super().__init__()
        self.read_fd, self._write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)

    def set(self) -> None:
        super().set()
        with contextlib.suppress(OSError):
            os.write(self._write_fd, b"x")

    def clear(self) -> None:
        super().clear()
        with contextlib.suppress(OSError):
            while os.read(self.read_fd, 512):
                pass

    def close(self) -> None:
        for fd in (self.read_fd, self._write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


class QuietLinuxDriver(LinuxDriver):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.exit_event = WakingEvent()

    def run_input_thread(self) -> None:
        """Read keys and hand them to the app until ``exit_event`` is set."""
        exit_event = self.exit_event
        assert isinstance(exit_event, WakingEvent)
        selector = selectors.SelectSelector()
        selector.register(self.fileno, selectors.EVENT_READ, "input")
        selector.register(exit_event.read_fd, selectors.EVENT_READ, "stop")
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode
        last_input = -TICKING_AFTER_INPUT
        try:
            while not exit_event.is_set():
                ticking = time.monotonic() - last_input < TICKING_AFTER_INPUT
                for key, _ in selector.select(TICK if ticking else None):
                    if key.data != "input":
                        continue
                    data = decode(os.read(self.fileno, 4096))
                    if not data:  # end of input (stdin is not a terminal any more)
                        return
                    last_input = time.monotonic()
                    for message in parser.feed(data):
                        self.process_message(message)
                for message in parser.tick():
                    self.process_message(message)
        finally:
            selector.close()
            with contextlib.suppress(Exception):
                for _ in parser.feed(""):
                    pass

    def close(self) -> None:
        super().close()
        if isinstance(self.exit_event, WakingEvent):
            self.exit_event.close()
