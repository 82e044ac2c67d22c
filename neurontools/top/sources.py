"""Where neuron-top's data comes from: the emulator daemon, or neuron-monitor reports on a stream.

Both produce ``Sample`` objects through the same mapping (``report_reader``): the daemon source
measures the period between two snapshots once (``report.period``), builds the report from it
with the monitor's ``ReportBuilder`` and adds what only the snapshot knows (``snapshot_extras``:
engine shares from the same period). Sources are used from one worker thread and may block.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Any, Protocol

from neurontools.contract.snapshot import Snapshot, SnapshotError, SnapshotParser, fetch_snapshot
from neurontools.report.builder import ReportBuilder
from neurontools.report.monitor_config import every_group_config
from neurontools.report.period import measure
from neurontools.sources.daemon_client import DaemonClient, DaemonError, DaemonUnavailable
from neurontools.sources.report_stream import ReportStream, StreamEnded
from neurontools.sources.tool_session import ToolSession
from neurontools.top.model import Sample
from neurontools.top.report_reader import ReportReader
from neurontools.top.snapshot_extras import engine_shares, process_fields

STREAM_POLL = 0.2  # seconds a stream read waits before giving the worker a chance to stop


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

    def __init__(self, client: Any, interval: float, tools_version: str, command: str = "neuron-top") -> None:
        self.client = client
        self.tools_version = tools_version
        self.builder = ReportBuilder(every_group_config(interval))
        self.reader = ReportReader(tools_version)
        self.parser = SnapshotParser()
        self.session = ToolSession(client, command)
        self.address = str(getattr(client, "address", "")) or "the daemon address"
        self._prev: Snapshot | None = None
        self._check_registration = True

    def read(self) -> Sample:
        try:
            cur = fetch_snapshot(self.client, self.builder.latencies_since(), self.parser)
        except DaemonUnavailable as exc:
            self._check_registration = True
            raise SourceUnavailable(f"daemon unreachable at {exc.address}; retrying ({exc.reason})") from None
        except (DaemonError, SnapshotError) as exc:
            self._check_registration = True
            raise SourceUnavailable(f"unexpected answer from the daemon at {self.address}: {exc}; retrying") from None
        if self._check_registration:
            self._register()
        period = measure(self._prev, cur)  # every figure of this sample comes from it
        sample = self.reader.read(self.builder.update(cur, period=period), process_fields(cur))
        sample = replace(sample, engines=engine_shares(period))
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
        self.reader = ReportReader(tools_version)

    def read(self) -> Sample | None:
        try:
            report = self.stream.next_report(STREAM_POLL)
        except StreamEnded:
            raise SourceEnded(f"end of neuron-monitor input on {self.stream.name}; showing the last report") from None
        return self.reader.read(report) if report is not None else None

    def close(self) -> None:
        pass


def daemon_client(address: Any = None, timeout: float = 5.0) -> DaemonClient:
    return DaemonClient(address, timeout=timeout)
