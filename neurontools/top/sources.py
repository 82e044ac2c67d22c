"""Where neuron-top's data comes from: the emulator daemon, or neuron-monitor reports on a stream.

The daemon source measures the period between two snapshots once (``report.period``) and reads
every figure of the ``Sample`` from it (``period_sample``); the stream source maps each report
once (``report_sample``). Sources are used from one worker thread and may block.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

from neurontools.contract.snapshot import Snapshot, SnapshotError, SnapshotParser, fetch_snapshot
from neurontools.report.period import measure
from neurontools.sources.daemon_client import DaemonClient, DaemonError, DaemonUnavailable
from neurontools.sources.report_stream import ReportStream, StreamEnded
from neurontools.sources.tool_session import ToolSession
from neurontools.top.model import Sample
from neurontools.top.period_sample import PeriodReader
from neurontools.top.report_sample import sample_from_report

STREAM_POLL = 0.2  # seconds a stream read waits before giving the worker a chance to stop
# neuron-top shows no execution latencies: it asks the daemon only for those of executions that
# end after this (daemon monotonic seconds: 30 million years), so its snapshots carry no latency
# lists (docs/snapshot.md). Written without an exponent: a '+' in a query string reads as a space.
NO_LATENCIES = 1e15


class SourceUnavailable(Exception):
    """The source cannot be read right now; the message is the banner text."""


class SourceEnded(Exception):
    """The source will never deliver again (end of input); the message is the banner text."""


class SampleSource(Protocol):
    paced: bool  # True: the caller waits its interval between reads; False: read() waits for data itself

    def read(self) -> Sample | None:
        """The next sample (no history yet); None when nothing new arrived (unpaced sources)."""
        ...

    def close(self) -> None: ...


class DaemonSource:
    """One daemon snapshot per read; registers neuron-top with the daemon as a tool."""

    paced = True

    def __init__(self, client: Any, tools_version: str, command: str = "neuron-top") -> None:
        self.client = client
        self.reader = PeriodReader(tools_version)
        self.parser = SnapshotParser()
        self.session = ToolSession(client, command)
        self.address = str(getattr(client, "address", "")) or "the daemon address"
        self._prev: Snapshot | None = None
        self._check_registration = True

    def read(self) -> Sample:
        try:
            cur = fetch_snapshot(self.client, NO_LATENCIES, self.parser)
        except DaemonUnavailable as exc:
            self._check_registration = True
            raise SourceUnavailable(f"daemon unreachable at {exc.address}; retrying ({exc.reason})") from None
        except (DaemonError, SnapshotError) as exc:
            self._check_registration = True
            raise SourceUnavailable(f"unexpected answer from the daemon at {self.address}: {exc}; retrying") from None
        if self._check_registration:
            self._register()
        sample = self.reader.read(measure(self._prev, cur))
        self._prev = cur
        return sample

    def _register(self) -> None:
        """Be listed by ``neuron-ls -a`` while running; a restarted daemon forgot us: register again."""
        self._check_registration = not self.session.ensure()

    def close(self) -> None:
        with contextlib.suppress(DaemonUnavailable, DaemonError):
            self.session.close()


class StreamSource:
    """neuron-monitor reports from a stream, each shown as it arrives."""

    paced = False

    def __init__(self, stream: ReportStream, tools_version: str) -> None:
        self.stream = stream
        self.tools_version = tools_version

    def read(self) -> Sample | None:
        try:
            report = self.stream.next_report(STREAM_POLL)
        except StreamEnded:
            raise SourceEnded(f"end of neuron-monitor input on {self.stream.name}; showing the last report") from None
        return sample_from_report(report, self.tools_version) if report is not None else None

    def close(self) -> None:
        pass


def daemon_client(address: Any = None, timeout: float = 5.0) -> DaemonClient:
    return DaemonClient(address, timeout=timeout)
