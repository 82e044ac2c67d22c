"""Live progress of a training run: a rich progress bar on a terminal, else a plain log line every
few steps (as training frameworks log), then the summary. Only rank 0 reports."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Protocol, TextIO

from emulator.workloads.summary import format_seconds, header_line, step_rate, summary_lines

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from emulator.workloads.results import RunHeader, RunResult, StepStats


class Reporter(Protocol):
    def start(self, header: RunHeader) -> None: ...
    def step(self, stats: StepStats) -> None: ...
    def finish(self, result: RunResult) -> None: ...
    def close(self) -> None: ...


def log_interval(steps: int) -> int:
    """Log every 10 steps on long runs, more often on short ones (always step 1 and the last)."""
    return min(10, max(1, steps // 10))


def _step_fields(stats: StepStats, header: RunHeader) -> tuple[str, str, str]:
    """(loss, throughput, step time) texts of one step; the time source ends the step time."""
    loss = f"{stats.loss:.4f}" if stats.loss is not None else "n/a"
    rate = step_rate(stats)
    if rate is None:  # a step that took no measurable time
        return loss, "throughput n/a", f"{format_seconds(stats.wall_seconds)}/step (wall)"
    throughput = f"{rate.samples_per_second:,.1f} {header.sample_unit}/s"
    return loss, throughput, f"{format_seconds(rate.seconds_per_step)}/step ({rate.source})"


class Quiet:
    """Ranks other than 0 print nothing."""

    def start(self, header: RunHeader) -> None:
        pass

    def step(self, stats: StepStats) -> None:
        pass

    def finish(self, result: RunResult) -> None:
        pass

    def close(self) -> None:
        pass


class PlainLog:
    """One line per ``log_interval`` steps (and for every step that compiled a graph); flushed, so
    pipes and log files see it at once."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.header: RunHeader | None = None
        self.every = 1

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def start(self, header: RunHeader) -> None:
        self.header, self.every = header, log_interval(header.steps)
        self._print(header_line(header))

    def step(self, stats: StepStats) -> None:
        assert self.header is not None
        h = self.header
        if not (stats.step == 1 or stats.step % self.every == 0 or stats.step == h.steps or stats.compiled):
            return
        loss, throughput, step_time = _step_fields(stats, h)
        parts = [f"step {stats.step:>{len(str(h.steps))}}/{h.steps}", f"loss {loss}", throughput, step_time]
        if stats.compiled:
            parts.append("compiled a new graph")
        if stats.device and stats.device.outcome not in (None, "completed"):
            parts.append(f"outcome {stats.device.outcome}")
        self._print("  ".join(parts))

    def finish(self, result: RunResult) -> None:
        for line in summary_lines(result):
            self._print(line)

    def close(self) -> None:
        pass


class RichBar:
    """A rich progress bar with step, loss, throughput and step time; the summary below it."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console()
        self.progress: Progress | None = None
        self.task: TaskID | None = None
        self.header: RunHeader | None = None

    def start(self, header: RunHeader) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.header = header
        self.console.print(header_line(header), highlight=False, markup=False, soft_wrap=True)
        columns = [
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=20),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"),
            TextColumn("{task.fields[throughput]}"),
            TextColumn("{task.fields[step_time]}"),
            TimeElapsedColumn(),
        ]
        self.progress = Progress(*columns, console=self.console)
        self.progress.start()
        self.task = self.progress.add_task(header.workload, total=header.steps, loss="-", throughput="-", step_time="-")

    def step(self, stats: StepStats) -> None:
        assert self.progress is not None and self.task is not None and self.header is not None
        loss, throughput, step_time = _step_fields(stats, self.header)
        self.progress.update(self.task, completed=stats.step, loss=loss, throughput=throughput, step_time=step_time)

    def finish(self, result: RunResult) -> None:
        self.close()
        for line in summary_lines(result):
            self.console.print(line, highlight=False, markup=False, soft_wrap=True)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def make_reporter(*, quiet: bool = False, out: TextIO | None = None) -> Reporter:
    if quiet:
        return Quiet()
    stream = out or sys.stdout
    if stream.isatty():
        try:
            return RichBar()
        except ImportError:  # rich is part of the emulator extra; fall back rather than fail
            pass
    return PlainLog(stream)
