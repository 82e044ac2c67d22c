"""neuron-monitor reports read from a stream (``neuron-monitor | neuron-top --source -``).

A daemon thread reads the stream line by line, so a consumer never blocks on it for longer than
it asks to: ``next_report(timeout)`` hands out reports in arrival order. Blank lines are skipped;
a line that is not a JSON object is skipped and counted (``bad_lines``, ``last_error``), as the
official companion scripts do. End of input is reported once every queued report was taken.
"""

from __future__ import annotations

import json
import queue
import threading
from typing import IO, Any

MAX_QUEUED = 1000  # reports waiting to be taken; older ones are dropped first


class StreamEnded(EOFError):
    """The producer closed the stream and every report was taken."""


class ReportStream:
    def __init__(self, stream: IO[bytes], *, name: str = "standard input") -> None:
        self.name = name
        self.bad_lines = 0
        self.last_error = ""
        self._stream = stream
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._ended = False
        self._thread = threading.Thread(target=self._read, name="neuron-report-stream", daemon=True)
        self._thread.start()

    def _put(self, item: dict[str, Any] | None) -> None:
        while self._queue.qsize() >= MAX_QUEUED:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._queue.put(item)

    def _read(self) -> None:
        try:
            for raw in iter(self._stream.readline, b""):
                line = raw.strip()
                if not line:
                    continue
                try:
                    report = json.loads(line)
                except ValueError as exc:
                    report, error = None, f"not JSON: {exc}"
                else:
                    error = "" if isinstance(report, dict) else "not a JSON object"
                if error:
                    self.bad_lines += 1
                    self.last_error = error
                    continue
                self._put(report)
        except (OSError, ValueError) as exc:  # closed or unreadable stream: treat as its end
            self.last_error = str(exc)
        finally:
            self._put(None)

    def next_report(self, timeout: float) -> dict[str, Any] | None:
        """The next report, or None when none arrived within ``timeout`` seconds.

        Raises ``StreamEnded`` at end of input.
        """
        if self._ended:
            raise StreamEnded(self.name)
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is None:
            self._ended = True
            raise StreamEnded(self.name)
        return item
