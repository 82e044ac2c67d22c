"""``neuron-monitor``: collect metric groups on their periods and print one JSON report per line.

Behaviour (docs/reference/neuron-monitor.md §Command line; choices where the real tool is undocumented):

* ``neuron-monitor [-c/--config-file FILE] [--verbose N]``; without ``-c`` the default
  configuration of that section. Bad flags or a bad configuration: one line on stderr, exit 1.
* The first report is written right after start, then one whenever a group is due. Wake-ups
  are scheduled from one monotonic start time (start + k * period per group, missed ticks are
  skipped), so the cadence does not drift; each wake-up fetches one daemon snapshot.
* The tool registers with the daemon as a ``tool`` process for its lifetime (``neuron-ls -a``).
* No daemon at start: one line on stderr saying how to start one, exit 1. Daemon gone
  mid-run: keep running, like the real tool when the driver goes away; reports carry the error
  in ``neuron_hardware_info.error`` and in the due system groups, ``neuron_runtime_data`` is
  ``[]``; when the daemon is back, reporting resumes (and the tool registers again).
* SIGINT / SIGTERM: exit 0 without a traceback; stdout closed by the reader: exit 0 quietly.
* ``--verbose`` 1: daemon outages; 2: every wake-up; 3-4: also snapshot timings (stderr).
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Protocol, TextIO

from neurontools.cli import (
    STOPPED,
    RaisingParser,
    arguments,
    number_in_range,
    options_or_status,
    print_error,
    silence_stdout,
    stop_signals,
)
from neurontools.contract.snapshot import Snapshot, SnapshotError, fetch_snapshot
from neurontools.monitor.config import ConfigError, GroupKey, MonitorConfig, default_config, load_config
from neurontools.report.builder import Report, ReportBuilder
from neurontools.report.encoding import encode_report
from neurontools.sources.address import AddressError
from neurontools.sources.daemon_client import DaemonClient, DaemonError, DaemonUnavailable
from neurontools.sources.tool_session import ToolSession

PROG = "neuron-monitor"
HEARTBEAT: GroupKey = (None, "")  # schedule key used when no group is configured
SLACK = 0.001  # groups due within 1 ms of each other are collected in one wake-up

USAGE = (
    "Usage:\n"
    f"  {PROG} [OPTIONS]\n"
    "\n"
    "Application Options:\n"
    "  -c, --config-file=FILE  JSON configuration file (default: all application groups, vcpu_usage\n"
    "                          and memory_info for every Neuron process, period 5s)\n"
    "      --verbose=N         diagnostics on stderr, 0 (none) to 4 (most) (default: 0)\n"
    "\n"
    "Help Options:\n"
    "  -h, --help              Show this help message\n"
    "\n"
    "Environment:\n"
    "  NEURON_EMULATOR_ADDR    emulator daemon address (socket path or http://127.0.0.1:PORT)\n"
)


class SnapshotClient(Protocol):
    """What the monitor needs from a daemon client (``DaemonClient`` or a fake in tests)."""

    def get(self, path: str) -> Any: ...

    def post(self, path: str, body: Any) -> Any: ...

    def delete(self, path: str) -> Any: ...


@dataclass
class Options:
    config_file: str | None = None
    verbose: int = 0
    help: bool = False


_verbosity = number_in_range(
    int,
    0,
    4,
    invalid="invalid value {text!r} (expected an integer 0-4)",
    out_of_range="{value} is out of range (expected 0-4)",
)


def parse_args(argv: Sequence[str]) -> Options:
    parser = RaisingParser(prog=PROG, add_help=False, allow_abbrev=False)
    parser.add_argument("-c", "--config-file", dest="config_file")
    parser.add_argument("--verbose", type=_verbosity, default=0)
    parser.add_argument("-h", "--help", action="store_true")
    ns = parser.parse_args(list(argv))
    return Options(config_file=ns.config_file, verbose=ns.verbose, help=ns.help)


class Schedule:
    """Due times of every group: ``start + k * period``, never drifting, missed ticks skipped."""

    def __init__(self, periods: Mapping[GroupKey, float], start: float) -> None:
        self.start = start
        self.periods = dict(periods)
        self._tick = dict.fromkeys(self.periods, 0)

    def next_time(self, key: GroupKey) -> float:
        return self.start + self._tick[key] * self.periods[key]

    def due(self, now: float) -> list[GroupKey]:
        return [key for key in self.periods if self.next_time(key) <= now + SLACK]

    def advance(self, keys: Collection[GroupKey], now: float) -> None:
        """Mark ``keys`` collected at ``now``: move each to its first tick after ``now``."""
        for key in keys:
            period = self.periods[key]
            self._tick[key] = max(self._tick[key] + 1, math.floor((now + SLACK - self.start) / period) + 1)

    def next_wake(self) -> float:
        return min(self.next_time(key) for key in self.periods)


def _write_line(out: TextIO, text: str) -> None:
    buffer = getattr(out, "buffer", None)
    if buffer is not None:
        out.flush()
        buffer.write(text.encode("utf-8") + b"\n")
        buffer.flush()
    else:
        out.write(text + "\n")
        out.flush()


@dataclass(eq=False)
class Monitor:
    """The collection loop; clock, sleep, output and daemon client are injectable."""

    client: SnapshotClient
    config: MonitorConfig
    out: TextIO
    _: KW_ONLY
    session: ToolSession | None = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    verbose: int = 0
    err: TextIO = field(default_factory=lambda: sys.stderr)
    builder: ReportBuilder = field(init=False)
    daemon_down: bool = field(default=False, init=False)
    reports: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.builder = ReportBuilder(self.config)

    def log(self, level: int, message: str) -> None:
        if self.verbose >= level:
            print(f"{PROG}: {message}", file=self.err, flush=True)

    def _fetch(self) -> Snapshot:
        since = self.builder.latencies_since()
        if self.verbose < 3:
            return fetch_snapshot(self.client, since)
        started = time.perf_counter()
        snap = fetch_snapshot(self.client, since)
        self.log(3, f"snapshot fetched in {(time.perf_counter() - started) * 1000:.1f} ms")
        return snap

    def collect(self, due: Collection[GroupKey], snapshot: Snapshot | None = None) -> Report:
        """One wake-up: one snapshot (or the error why there is none), the due groups, the report."""
        if snapshot is None:
            try:
                snapshot = self._fetch()
            except (DaemonUnavailable, DaemonError, SnapshotError) as exc:
                if not self.daemon_down:
                    self.log(1, f"cannot read the Neuron emulator daemon, reporting the error: {exc}")
                self.daemon_down = True
                return self.builder.update_unavailable(str(exc), due)
        if self.daemon_down:
            self.daemon_down = False
            self.log(1, "the Neuron emulator daemon answers again")
            self._register_again()
        return self.builder.update(snapshot, due)

    def _register_again(self) -> None:
        """A restarted daemon forgot this tool: register again (best effort)."""
        if self.session is not None and self.session.registered:
            self.session.ensure()

    def run(self, first: Snapshot | None = None) -> None:
        """Report until interrupted (KeyboardInterrupt / Terminated / BrokenPipeError propagate)."""
        periods = self.config.periods() or {HEARTBEAT: self.config.period}
        start = self.clock()
        schedule = Schedule(periods, start)
        while True:
            now = self.clock()
            due = schedule.due(now)
            if due:
                report = self.collect(due, first)
                first = None
                _write_line(self.out, encode_report(report))
                self.reports += 1
                schedule.advance(due, self.clock())  # after a slow fetch, skip the ticks it overran
                self.log(2, f"report {self.reports} at +{now - start:.3f}s: {', '.join(_names(due))}")
            wait = schedule.next_wake() - self.clock()
            if wait > 0:
                self.sleep(wait)


def _names(keys: Collection[GroupKey]) -> list[str]:
    return [group if runtime is None else f"{group}[{runtime}]" for runtime, group in keys if group]


def main(
    argv: Sequence[str] | None = None,
    *,
    client: SnapshotClient | None = None,
    stdout: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    argv = arguments(argv)
    out = stdout if stdout is not None else sys.stdout
    opts = options_or_status(parse_args, argv, PROG, USAGE, out)
    if isinstance(opts, int):
        return opts
    try:
        config = load_config(opts.config_file) if opts.config_file is not None else default_config()
    except ConfigError as exc:
        return print_error(PROG, str(exc))
    try:
        daemon = client if client is not None else DaemonClient()
    except AddressError as exc:
        return print_error(PROG, str(exc))

    session = ToolSession(daemon, " ".join([PROG, *argv]))
    try:
        with stop_signals():  # SIGTERM: unregister from the daemon and exit 0, as on Ctrl-C
            try:
                return _monitor(daemon, config, out, session, opts.verbose, clock, sleep)
            finally:
                with contextlib.suppress(*STOPPED):
                    session.close()
    except STOPPED:
        return 0


def _monitor(
    daemon: SnapshotClient,
    config: MonitorConfig,
    out: TextIO,
    session: ToolSession,
    verbose: int,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> int:
    try:
        session.open()
        first = fetch_snapshot(daemon)
    except DaemonUnavailable as exc:
        return print_error(PROG, str(exc))
    except (DaemonError, SnapshotError) as exc:
        return print_error(PROG, f"unexpected answer from the Neuron emulator daemon: {exc}")
    monitor = Monitor(daemon, config, out, session=session, clock=clock, sleep=sleep, verbose=verbose)
    try:
        monitor.run(first)
    except BrokenPipeError:
        silence_stdout(out)
    return 0
