"""neuron-monitor reports read from a stream (``neuron-monitor | neuron-top --source -``).

A daemon thread reads the stream line by line, so a consumer never blocks on it for longer than
it asks to: ``next_report(timeout)`` hands out reports in arrival order. Blank lines are skipped;
a line that is not a JSON object is skipped and counted (``bad_lines``, ``last_error``), as the
official companion scripts do. End of input is reported once every queued report was taken.

A line is read up to ``MAX_LINE_BYTES``: a longer one is skipped as it arrives, never held in
memory whole (docs/fuzzing.md); so is one nested too deeply for the JSON parser.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from typing import IO, Any

MAX_QUEUED = 1000  # reports waiting to be taken; older ones are dropped first
# a report of a trn1.32xlarge with 32 busy processes is a few hundred KB: 16 MiB is no real one
MAX_LINE_BYTES = 16 << 20


def read_lines(stream: IO[bytes], limit: int = MAX_LINE_BYTES) -> Iterator[bytes | None]:
    """The lines of ``stream`` (with their newline); None for a line longer than ``limit``
    bytes, whose rest is read and dropped in pieces of at most ``limit`` bytes."""
    while True:
        line = stream.readline(limit + 1)
        if not line:
            return
        if len(line) <= limit or line.endswith(b"\n"):
            yield line
            continue
        while line and not line.endswith(b"\n"):
            line = stream.readline(limit + 1)
        yield None


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
            for raw in read_lines(self._stream):
                if raw is None:
                    report, error = None, f"line longer than {MAX_LINE_BYTES} bytes"
                elif not (line := raw.strip()):
                    continue
                else:
                    try:
                        report = json.loads(line)
                    except (ValueError, RecursionError) as exc:
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
