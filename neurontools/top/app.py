"""neuron-top: the Textual application and its ``main()``.

Data is read by a thread worker (``Sampler.next`` may block on the daemon or the stream) and
handed to the UI thread as an immutable ``Sample``; keys only change the ``DisplayState`` and
redraw from the sample already there, so the screen never waits for I/O.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import ClassVar, Protocol

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.worker import get_current_worker

from neurontools import __version__
from neurontools.cli import (
    UsageError,
    arguments,
    handle_signals,
    options_or_status,
    print_error,
)
from neurontools.messages import one_line
from neurontools.sources.address import AddressError, DaemonAddress, parse_address, resolve_address
from neurontools.sources.report_stream import ReportStream
from neurontools.top.cli import PROG, USAGE, Options, parse_args
from neurontools.top.driver import QuietLinuxDriver
from neurontools.top.model import Sample
from neurontools.top.sampler import Sampler
from neurontools.top.sources import DaemonSource, SampleSource, StreamSource, daemon_client
from neurontools.top.state import DisplayState
from neurontools.top.view import tabs
from neurontools.top.widgets.app_tabs import AppTabs
from neurontools.top.widgets.core_grid import CoreGrid, grid_title
from neurontools.top.widgets.engine_table import EngineTable, engine_title
from neurontools.top.widgets.header import Banner, SectionBar, TitleBar, core_version
from neurontools.top.widgets.help_line import HelpLine
from neurontools.top.widgets.memory_summary import MemorySummary
from neurontools.top.widgets.memory_tree_view import MemoryTreeView
from neurontools.top.widgets.panel import TextPanel
from neurontools.top.widgets.process_panel import ProcessPanel
from neurontools.top.widgets.vcpu import VcpuPanel

IDLE_WAIT = 0.1  # seconds between reads of an unpaced feed that had nothing new
# A refresh of a 32-process job allocates tens of thousands of short-lived objects: at Python's
# default threshold (700) the cyclic collector ran several times per refresh, and now and then
# through the whole heap (Textual, the modules): a tenth of neuron-top's CPU. Collect less often,
# and leave what exists at start-up out of full collections (gc.freeze).
GC_THRESHOLD = (10_000, 10, 10)


class SampleFeed(Protocol):
    """What the app reads samples from (``Sampler``, or a fixed feed in tests)."""

    @property
    def paced(self) -> bool: ...

    def next(self) -> Sample | None: ...

    def close(self) -> None: ...


class CoreArea(VerticalScroll):
    """Holds the grid or the engine table; scrolls (mouse) when they do not fit."""

    can_focus = False
    DEFAULT_CSS = """
    CoreArea { height: auto; max-height: 55%; scrollbar-size-vertical: 1; }
    """


class NeuronTopApp(App[None]):
    TITLE = PROG
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    Screen { overflow: hidden; }
    #title { dock: top; }
    #bottom { dock: bottom; height: auto; }
    #engines, #processes { display: none; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", show=False),
        *(Binding(str(n), f"select_tab({n})", show=False) for n in range(1, 10)),
        Binding("a", "step_tab(-1)", show=False),
        Binding("d", "step_tab(1)", show=False),
        Binding("f,F", "toggle('flops')", show=False),
        Binding("e", "toggle('engines')", show=False),
        Binding("s", "toggle('history')", show=False),
        Binding("p", "toggle('processes')", show=False),
        Binding("up", "tree_move(-1)", show=False),
        Binding("down", "tree_move(1)", show=False),
        Binding("left", "tree_open(False)", show=False),
        Binding("right", "tree_open(True)", show=False),
        Binding("enter", "tree_toggle", show=False),
        Binding("x", "tree_toggle_all", show=False),
    ]

    def __init__(self, feed: SampleFeed, interval: float = 1.0, *, tools_version: str = __version__) -> None:
        super().__init__(driver_class=QuietLinuxDriver if os.name == "posix" else None)
        self.feed = feed
        self.interval = interval
        self.sample = Sample(tools_version=tools_version)
        self.display_state = DisplayState()
        self.samples_applied = 0
        self._stop = threading.Event()
        self._panels: list[TextPanel] = []  # set on mount

    def compose(self) -> ComposeResult:
        yield TitleBar(id="title")
        yield Banner(id="banner")
        yield SectionBar("NeuronCore Utilization", id="core-bar")
        with CoreArea(id="core-area"):
            yield CoreGrid(id="grid")
            yield EngineTable(id="engines")
        yield SectionBar("vCPU Utilization", id="vcpu-bar")
        yield VcpuPanel(id="vcpu")
        yield SectionBar("Memory Usage Summary", id="memory-bar")
        yield MemorySummary(id="memory-summary")
        yield MemoryTreeView(id="tree")
        yield ProcessPanel(id="processes")
        with Vertical(id="bottom"):
            yield AppTabs(id="tabs")
            yield HelpLine(id="help")

    def on_mount(self) -> None:
        # the panels drawn from the sample, found once (a DOM query on every refresh cost more
        # than some of the drawing)
        self._panels = [panel for panel in self.query(TextPanel) if not isinstance(panel, SectionBar)]
        self._core_bar = self.query_one("#core-bar", SectionBar)
        self._core_views = (self.query_one("#grid"), self.query_one("#engines"))
        self._lower_views = (self.query_one("#tree"), self.query_one("#processes"))
        self.redraw()
        self.run_worker(self._poll, name="poll", thread=True, exclusive=True, exit_on_error=False)

    # -- data -----------------------------------------------------------------------------------

    def _poll(self) -> None:
        """Worker thread: read samples and hand them to the UI thread until the app stops."""
        worker = get_current_worker()
        while not worker.is_cancelled and not self._stop.is_set():
            started = time.monotonic()
            try:
                sample = self.feed.next()
            except Exception as exc:  # a bug must not freeze the screen silently: say so and retry
                sample = replace(self.sample, error=f"internal error reading the source: {exc!r}; retrying")
            if sample is not None:
                try:
                    self.call_from_thread(self.apply_sample, sample)
                except RuntimeError:  # the app is closing
                    return
            if self.feed.paced:
                self._stop.wait(max(self.interval - (time.monotonic() - started), 0.0))
            elif sample is None:  # an unpaced feed with nothing new (e.g. its input ended): do not spin
                self._stop.wait(IDLE_WAIT)

    def apply_sample(self, sample: Sample) -> None:
        self.sample = sample
        pid = self.display_state.pid
        if pid is not None and sample.app(pid) is None:  # the selected application exited
            self.display_state = replace(self.display_state, pid=None)
        self.samples_applied += 1
        self.redraw()

    def redraw(self) -> None:
        sample, state = self.sample, self.display_state
        self._core_bar.set_text(engine_title(core_version(sample)) if state.engines else grid_title(sample, state))
        grid, engines = self._core_views
        grid.display, engines.display = not state.engines, state.engines
        tree, processes = self._lower_views
        tree.display, processes.display = not state.processes, state.processes
        for panel in self._panels:
            panel.show(sample, state)

    # -- keys -----------------------------------------------------------------------------------

    def _select(self, pid: int | None) -> None:
        self.display_state = replace(self.display_state, pid=pid)
        self.redraw()

    def action_select_tab(self, number: int) -> None:
        for tab in tabs(self.sample):
            if tab.number == number:
                self._select(tab.pid)

    def action_step_tab(self, delta: int) -> None:
        all_tabs = tabs(self.sample)
        pids = [tab.pid for tab in all_tabs]
        current = pids.index(self.display_state.pid) if self.display_state.pid in pids else 0
        self._select(pids[(current + delta) % len(pids)])

    def action_toggle(self, name: str) -> None:  # type: ignore[override]  # replaces DOMNode's async action_toggle
        self.display_state = replace(self.display_state, **{name: not getattr(self.display_state, name)})
        self.redraw()

    @property
    def tree(self) -> MemoryTreeView:  # type: ignore[override]  # shadows DOMNode.tree (a debug rich Tree)
        return self.query_one("#tree", MemoryTreeView)

    def action_tree_move(self, delta: int) -> None:
        self.tree.move(delta)

    def action_tree_open(self, is_open: bool) -> None:
        self.tree.set_open(is_open)

    def action_tree_toggle(self) -> None:
        self.tree.toggle()

    def action_tree_toggle_all(self) -> None:
        self.tree.toggle_all()

    async def action_quit(self) -> None:
        self._stop.set()
        self.exit()

    def on_unmount(self) -> None:
        self._stop.set()


# -- main -----------------------------------------------------------------------------------------


def _stdin_source() -> StreamSource:
    """Reports come on fd 0: move them to another fd and take keys from the terminal instead."""
    if os.isatty(0):
        raise UsageError(f"--source -: stdin is a terminal; pipe reports in: neuron-monitor | {PROG} --source -")
    data_fd = os.dup(0)
    try:
        tty = os.open("/dev/tty", os.O_RDWR)
    except OSError as exc:
        os.close(data_fd)
        raise UsageError(f"--source -: no terminal to read keys from ({exc.strerror})") from None
    os.dup2(tty, 0)
    os.close(tty)
    return StreamSource(ReportStream(os.fdopen(data_fd, "rb", buffering=0)), __version__)


def _address(opts: Options) -> DaemonAddress:
    try:
        return parse_address(opts.source) if opts.source else resolve_address()
    except AddressError as exc:
        raise UsageError(str(exc)) from None


def make_source(opts: Options, argv: Sequence[str]) -> SampleSource:
    """Standard input, or the daemon (not contacted yet: neuron-top starts without one and retries)."""
    if opts.from_stdin:
        return _stdin_source()
    client = daemon_client(_address(opts), timeout=max(2.0, min(opts.interval * 2, 10.0)))
    return DaemonSource(client, __version__, " ".join([PROG, *argv]))


def main(argv: Sequence[str] | None = None) -> int:
    argv = arguments(argv)
    opts = options_or_status(parse_args, argv, PROG, USAGE)
    if isinstance(opts, int):
        return opts
    try:
        if not opts.from_stdin:
            _address(opts)  # a bad address is the first thing to report
        if not sys.stdout.isatty():
            raise UsageError("standard output is not a terminal (neuron-top is interactive; try neuron-monitor)")
        source = make_source(opts, argv)
    except UsageError as exc:
        return print_error(PROG, str(exc))
    sampler = Sampler(source, __version__)
    app = NeuronTopApp(sampler, opts.interval)
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)
    try:
        with handle_signals(lambda *_: app.exit(), signal.SIGTERM):  # SIGTERM: leave the screen, exit
            app.run()
    except KeyboardInterrupt:
        pass
    finally:
        with contextlib.suppress(Exception):
            sampler.close()
    _report_skipped(source)
    return app.return_code or 0


def _report_skipped(source: SampleSource) -> None:
    """Once the screen is gone: one line on what the input stream held that was no report."""
    if not isinstance(source, StreamSource) or not source.stream.bad_lines:
        return
    n = source.stream.bad_lines
    what = "input line that was" if n == 1 else "input lines that were"
    last = one_line(source.stream.last_error[:200])
    print(f"{PROG}: skipped {n} {what} not neuron-monitor reports (last: {last})", file=sys.stderr, flush=True)
