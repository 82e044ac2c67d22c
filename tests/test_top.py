"""neuron-top: data mapping, keys, views and robustness with deterministic fake daemons (Textual
Pilot and SVG snapshots), and once for real: a daemon, a training process and neuron-top in tmux.

The fake daemon answers ``/v1/snapshot`` like the real one (docs/snapshot.md): cumulative
counters that grow by fixed amounts per call, one second of daemon time per call, fixed PIDs.
Everything neuron-top shows therefore follows from those rates through the real pipeline
(snapshot parsing, ReportBuilder, report mapping).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from neurontools.contract.snapshot_models import LoadedModel
from neurontools.sources.address import DaemonAddress
from neurontools.sources.daemon_client import DaemonUnavailable
from neurontools.sources.report_stream import ReportStream, StreamEnded
from neurontools.top import formats
from neurontools.top.app import NeuronTopApp
from neurontools.top.cli import parse_args
from neurontools.top.memory_tree import build_tree
from neurontools.top.model import Sample
from neurontools.top.report_sample import sample_from_report
from neurontools.top.sampler import Sampler
from neurontools.top.sources import DaemonSource, StreamSource
from neurontools.top.view import core_values, device_memory, host_memory
from neurontools.top.widgets.panel import TextPanel
from tests import snapshots
from tests.support import BIN, SPEC_INSTANCE_IDS, run_tool, tool_env, wait_until

VERSION = "0.1.0"  # tools version shown in the title of the snapshots (fixed, not the installed one)
FIXTURES = Path(__file__).parent / "fixtures" / "report"
MB = 1024 * 1024
ENGINE_SHARE = {"tensor": 0.5, "vector": 0.2, "scalar": 0.1, "gpsimd": 0.05, "dma": 0.15}
HARDWARE = {
    "trn1.2xlarge": (1, 2),
    "trn1.32xlarge": (16, 2),
}


# -- a fake daemon --------------------------------------------------------------------------------


@dataclass
class FakeApp:
    pid: int
    tag: str
    command: str
    cores: tuple[int, ...]
    busy: dict[int, float]  # busy share (0-1) per core
    flops: dict[int, float]  # FLOP/s per core
    cpu: tuple[float, float] = (0.1184, 0.0231)  # CPU seconds per second (user, system)
    steps: int = 12  # executions per second
    cache: tuple[int, int] = (40, 2)


@dataclass
class _Counters:
    busy: dict[int, float] = field(default_factory=dict)
    flops: dict[int, int] = field(default_factory=dict)
    engines: dict[int, dict[str, float]] = field(default_factory=dict)
    cpu: list[float] = field(default_factory=lambda: [0.0, 0.0])
    completed: int = 0


def _ramp(step: int) -> float:
    """A fixed, repeating load pattern so the sparklines have a shape."""
    return 0.6 + 0.4 * (step % 8) / 7


def _core_memory(core: int) -> dict[str, int]:
    return {
        "constants": 100 * MB,
        "model_code": 50 * MB,
        "model_shared_scratchpad": 512 * MB,
        "runtime_memory": 1 * MB,
        "tensors": 2048 * MB + core * 16 * MB,
    }


def _model(app: FakeApp, core: int, per_device: int) -> LoadedModel:
    return snapshots.loaded_model(
        name=f"2.14.227.0+2d4f85be-/tmp/neuroncc_compile_workdir/{app.pid:04x}{core:04x}",
        uuid=f"{app.pid:016x}{core:016x}",
        model_id=10001 + core,
        core=core,
        per_device=per_device,
        device={"constants": 100 * MB, "model_code": 50 * MB, "runtime_memory": 1 * MB, "tensors": 0},
        host={"application_memory": 20480, "constants": 0, "dma_buffers": 0, "tensors": 0},
    )


class FakeDaemon:
    """Answers the DaemonClient calls neuron-top makes; ``down`` lists snapshot calls that fail."""

    def __init__(self, instance_type: str, apps: Sequence[FakeApp], down: Iterable[int] = ()) -> None:
        self.instance_type = instance_type
        self.apps = list(apps)
        self.down = set(down)
        self.address = DaemonAddress(socket_path="/tmp/fake-neuron-emulator.sock")
        self.calls = 0
        self.step = 0
        self.registered: list[dict[str, Any]] = []
        self._counters: dict[int, _Counters] = {}

    def _advance(self) -> None:
        self.step += 1
        for app in self.apps:
            c = self._counters.setdefault(app.pid, _Counters())
            for core in app.cores:
                busy = app.busy.get(core, 0.0) * _ramp(self.step)
                c.busy[core] = c.busy.get(core, 0.0) + busy
                c.flops[core] = c.flops.get(core, 0) + int(app.flops.get(core, 0.0) * _ramp(self.step))
                engines = c.engines.setdefault(core, dict.fromkeys(ENGINE_SHARE, 0.0))
                for name, share in ENGINE_SHARE.items():
                    engines[name] += busy * share
            c.cpu = [c.cpu[0] + app.cpu[0], c.cpu[1] + app.cpu[1]]
            c.completed += app.steps

    def snapshot(self) -> dict[str, Any]:
        devices, per = HARDWARE[self.instance_type]
        processes = [
            snapshots.runtime_process(
                app.pid,
                tag=app.tag,
                command=app.command,
                cores=app.cores,
                busy=self._counters[app.pid].busy,
                flops=self._counters[app.pid].flops,
                engines=self._counters[app.pid].engines,
                cpu=(self._counters[app.pid].cpu[0], self._counters[app.pid].cpu[1]),
                completed=self._counters[app.pid].completed,
                compile_cache=app.cache,
                core_memory={k: _core_memory(k) for k in app.cores},
                models=[_model(app, k, per) for k in app.cores],
            )
            for app in self.apps
        ]
        vcpu = {"user": 0.1416, "nice": 0.0, "system": 0.0311, "idle": 0.8273, "io_wait": 0.0, "irq": 0.0}
        return snapshots.snapshot(
            time=1795302762.0 + self.step,
            monotonic=5000.0 + self.step,
            instance=snapshots.instance(self.instance_type, SPEC_INSTANCE_IDS[self.instance_type]),
            hardware=snapshots.trn1_hardware(devices, per),
            processes=processes,
            vcpus=[{**{k: v * self.step for k, v in vcpu.items()}, "soft_irq": 0.0} for _ in range(8)],
            context_switches=1000 * self.step,
        )

    # DaemonClient interface
    def get(self, path: str) -> Any:
        if path == "/snapshot" or path.startswith("/snapshot?latencies_since="):  # no latencies to trim
            self.calls += 1
            if self.calls in self.down:
                raise DaemonUnavailable(self.address, "connection refused")
            self._advance()
            return self.snapshot()
        if path.startswith("/processes/"):
            return {}
        raise AssertionError(path)

    def post(self, path: str, body: Any) -> Any:
        self.registered.append(body)
        return body

    def delete(self, path: str) -> Any:
        return {}


def small_apps() -> list[FakeApp]:
    """trn1.2xlarge: two applications, one core each (tags as in docs/reference/neuron-top.md §Screen layout)."""
    return [
        FakeApp(4242, "4242", "python3 train.py", (0,), {0: 0.8742}, {0: 41285734118912}),
        FakeApp(5151, "neuron app 1", "torchrun --nproc_per_node=1 bert.py", (1,), {1: 0.6989}, {1: 10004e9}),
    ]


def big_apps() -> list[FakeApp]:
    """trn1.32xlarge: three applications on 30 of the 32 cores; cores 30-31 idle."""
    llama = range(16)
    gpt = range(16, 28)
    return [
        FakeApp(
            7001,
            "llama-7b",
            "torchrun --nproc_per_node=16 llama.py",
            tuple(llama),
            {c: 0.55 + 0.025 * c for c in llama},
            {c: 4e13 * (0.55 + 0.025 * c) for c in llama},
            cpu=(1.5, 0.2),
            steps=4,
            cache=(310, 16),
        ),
        FakeApp(7002, "7002", "python3 gpt.py", tuple(gpt), dict.fromkeys(gpt, 0.3125), dict.fromkeys(gpt, 9.946e12)),
        FakeApp(7003, "bert", "python3 bert.py", (28, 29), {28: 0.9, 29: 0.8}, {28: 3e13, 29: 2.5e13}),
    ]


def sample_after(daemon: FakeDaemon, reads: int) -> Sample:
    """The sample neuron-top shows after ``reads`` refreshes from ``daemon`` (the real pipeline)."""
    sampler = Sampler(DaemonSource(daemon, VERSION), VERSION)
    sample = None
    for _ in range(reads):
        sample = sampler.next()
    assert sample is not None
    return sample


# -- feeds and helpers for the app ----------------------------------------------------------------


class FixedFeed:
    """Always the same sample: the screen is fully deterministic."""

    paced = True

    def __init__(self, sample: Sample) -> None:
        self.sample = sample

    def next(self) -> Sample | None:
        return self.sample

    def close(self) -> None:
        pass


class QueueFeed:
    """Samples the test hands over one by one."""

    paced = True

    def __init__(self) -> None:
        self.queue: queue.Queue[Sample] = queue.Queue()

    def next(self) -> Sample | None:
        try:
            return self.queue.get_nowait()
        except queue.Empty:
            return None

    def close(self) -> None:
        pass


async def until(pilot: Any, predicate: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await pilot.pause(0.02)


def screen_text(app: NeuronTopApp) -> str:
    """The plain text of every visible section, top to bottom."""
    lines = []
    for panel in app.query(TextPanel):
        if panel.display and panel.parent is not None and panel.parent.display:
            lines.extend(line.plain for line in panel.lines(panel.size.width or app.size.width))
    return "\n".join(lines)


def fake_sample(instance_type: str, reads: int) -> Sample:
    """The sample after ``reads`` reads of the fake daemon of ``instance_type`` (trn1.2xlarge: the
    small applications, else the big ones)."""
    apps = small_apps() if instance_type == "trn1.2xlarge" else big_apps()
    return sample_after(FakeDaemon(instance_type, apps), reads)


@contextlib.asynccontextmanager
async def running(sample: Sample, size: tuple[int, int]) -> AsyncIterator[tuple[NeuronTopApp, Any]]:
    """neuron-top on ``sample`` under a Textual pilot, once the sample is on the screen."""
    app = NeuronTopApp(FixedFeed(sample), 60)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.samples_applied >= 1)
        yield app, pilot


def wait_first(count: int = 1):
    async def run_before(pilot: Any) -> None:
        await until(pilot, lambda: pilot.app.samples_applied >= count)

    return run_before


def press_after_data(*keys: str):
    async def run_before(pilot: Any) -> None:
        await until(pilot, lambda: pilot.app.samples_applied >= 1)
        await pilot.press(*keys)
        await pilot.pause()

    return run_before


# -- formats and mapping --------------------------------------------------------------------------


def test_number_formats_follow_the_spec() -> None:
    assert formats.fmt_bytes(int(888.4 * MB)) == "888.4MB"
    assert formats.fmt_bytes(0) == "0.0B"
    assert formats.fmt_bytes(34 * 1024) == "34.0KB"
    assert formats.fmt_bytes(int(20.2 * 1024 * MB)) == "20.2GB"
    assert formats.fmt_bytes(None) == "NA"
    assert formats.fmt_percent_cell(0.6989) == "[69.89%]"  # shares are shown as percent
    assert formats.fmt_percent_cell(None) == "[    NA]"
    assert formats.fmt_tflops_cell(10.004e12) == "[ 10.004TF]"
    assert formats.fmt_cpu_pair(0.0269, 0.0397) == "[ 2.69%, 3.97%]"
    assert formats.fmt_avg_percent(0.7119) == "Avg: 71.19%"
    assert formats.fmt_percent(0.4512) == "45.12%"
    assert formats.fmt_avg_total_tflops(9.946e12, 318.278e12) == "Avg:    9.946TF | Total:  318.278TF"
    assert formats.device_label(9) == "ND 9" and formats.device_label(10) == "ND10"
    assert formats.fmt_core_list((0, 1, 2, 3, 8, 10, 11)) == "0-3,8,10-11"


def test_spec_report_maps_to_every_section() -> None:
    report = json.loads((FIXTURES / "spec_illustrative_report.json").read_text())
    sample = sample_from_report(report, VERSION)
    assert (sample.instance_id, sample.instance_type, sample.neuroncore_version) == (
        "i-0123456789abcdef0",
        "trn1.2xlarge",
        "v2",
    )
    assert sample.system_vcpu == (0.1416, 0.0311)  # the report's percentages as shares
    [app] = sample.apps
    assert (app.pid, app.tag, app.cores, app.vcpu) == (4242, "4242", (0, 1), (0.1184, 0.0231))
    assert app.steps_per_second == pytest.approx(12 / 1.000086123)
    values = core_values(sample, None, 2)
    assert [v.utilization for v in values] == [0.8742, 0.8697]
    assert [v.flops for v in values] == [41285734118912, 41072219504640]
    assert dict(host_memory(sample, None)) == {
        "Total": 2168455168,
        "Tensors": 4194304,
        "Constants": 0,
        "DMA Buffers": 16777216,
        "App. Memory": 2147483648,
    }
    device = dict(device_memory(sample, None))
    assert device["Total"] == 5685379072 and device["Model Scratchpad"] == 2 * 536870912
    [nd0] = build_tree(sample, None)
    assert nd0.label == "ND 0" and nd0.device_bytes == 5685379072
    nc0 = nd0.children[0]
    model = nc0.children[0]
    assert (model.model_id, model.device_bytes, model.host_bytes) == ("10001", 158334976, 20480)
    assert [c.label for c in nc0.children[1:]] == [
        "Tensors",
        "Constants",
        "Model Code",
        "Runtime Memory",
        "Model Scratchpad",
    ]
    assert sum(c.device_bytes for c in nc0.children) == nc0.device_bytes == 5685379072 // 2
    # what only the daemon snapshot knows is not invented
    assert sample.engines is None and app.command is None and app.compile_hits is None


def test_first_report_shows_na_until_a_period_has_passed() -> None:
    sample = fake_sample("trn1.2xlarge", 1)
    assert [v.utilization for v in core_values(sample, None, 2)] == [None, None]
    assert sample.system_vcpu is None and sample.engines is None
    assert dict(device_memory(sample, None))["Total"] is not None  # memory is a gauge: known at once
    later = fake_sample("trn1.2xlarge", 2)
    assert [round(v.utilization, 4) for v in core_values(later, None, 2)] == [
        round(0.8742 * _ramp(2), 4),
        round(0.6989 * _ramp(2), 4),
    ]
    assert later.engines is not None and later.engines[0]["tensor"] == pytest.approx(0.8742 * _ramp(2) * 0.5)
    assert later.app(4242).compile_hits == 40 and later.app(4242).steps_per_second == pytest.approx(12)


def test_report_stream_reads_ndjson_and_skips_bad_lines() -> None:
    report = json.loads((FIXTURES / "spec_illustrative_report.json").read_text())
    read_fd, write_fd = os.pipe()
    with os.fdopen(write_fd, "wb") as out:
        out.write(b"\n" + json.dumps(report).encode() + b"\nnot json\n[1]\n" + json.dumps(report).encode() + b"\n")
    stream = ReportStream(os.fdopen(read_fd, "rb"))
    sampler = Sampler(StreamSource(stream, VERSION), VERSION)
    samples = [sampler.next(), sampler.next()]
    assert all(s is not None and s.apps[0].pid == 4242 and s.error is None for s in samples)
    assert [s.sequence for s in samples] == [1, 2] and samples[1].history[None, 0] == (0.8742, 0.8742)
    assert stream.bad_lines == 2
    ended = sampler.next()  # end of input: the last report stays on screen, with a banner
    assert ended is not None and ended.live and ended.apps == samples[1].apps
    assert ended.error == "end of neuron-monitor input on standard input; showing the last report"
    assert sampler.next() is None
    with pytest.raises(StreamEnded):
        stream.next_report(1.0)


# -- the app: keys and views ----------------------------------------------------------------------


def test_tabs_keys_and_selection_survive_processes_coming_and_going() -> None:
    async def scenario() -> None:
        daemon = FakeDaemon("trn1.2xlarge", small_apps())
        feed = QueueFeed()
        app = NeuronTopApp(feed, 0.02)
        sampler = Sampler(DaemonSource(daemon, VERSION), VERSION)

        async def push(pilot: Any) -> None:
            expected = app.samples_applied + 1
            feed.queue.put(sampler.next())
            await until(pilot, lambda: app.samples_applied >= expected)

        async with app.run_test(size=(120, 40)) as pilot:
            await push(pilot)
            await push(pilot)
            text = screen_text(app)
            assert "Neuron Apps  >[1]:all<  [2]:4242   [3]:neuron app 1 " in text
            await pilot.press("3")
            assert app.display_state.pid == 5151
            assert ">[3]:neuron app 1<" in screen_text(app)
            await pilot.press("a")
            assert app.display_state.pid == 4242
            await pilot.press("d", "d")
            assert app.display_state.pid is None
            await pilot.press("9")  # no such tab: nothing changes
            assert app.display_state.pid is None
            await pilot.press("3")
            # a new process appears before the selected one: the selection follows the PID
            daemon.apps.insert(0, FakeApp(3030, "new-job", "python3 new.py", (), {}, {}))
            await push(pilot)
            assert app.display_state.pid == 5151 and ">[4]:neuron app 1<" in screen_text(app)
            # another process exits: still selected
            daemon.apps = [a for a in daemon.apps if a.pid != 4242]
            await push(pilot)
            assert app.display_state.pid == 5151 and ">[3]:neuron app 1<" in screen_text(app)
            assert "[2]:4242" not in screen_text(app)
            # the selected process exits: back to all
            daemon.apps = [a for a in daemon.apps if a.pid != 5151]
            await push(pilot)
            assert app.display_state.pid is None and ">[1]:all<" in screen_text(app)
            await pilot.press("q")
        assert app.return_code == 0

    asyncio.run(scenario())


def test_only_changed_lines_are_repainted(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sample like the last repaints nothing; a new one repaints just the lines that differ,
    with no relayout; what is drawn is the new text (the CPU target rests on this)."""
    repaints: list[tuple[str, tuple[Any, ...], bool]] = []
    original = TextPanel.refresh

    def recording(self: TextPanel, *regions: Any, **kwargs: Any) -> Any:
        repaints.append((self.id or "", regions, bool(kwargs.get("layout"))))
        return original(self, *regions, **kwargs)

    monkeypatch.setattr(TextPanel, "refresh", recording)

    async def scenario() -> None:
        sampler = Sampler(DaemonSource(FakeDaemon("trn1.2xlarge", small_apps()), VERSION), VERSION)
        feed = QueueFeed()
        app = NeuronTopApp(feed, 0.02)
        async with app.run_test(size=(120, 40)) as pilot:

            async def push(sample: Sample) -> None:
                expected = app.samples_applied + 1
                feed.queue.put(sample)
                await until(pilot, lambda: app.samples_applied >= expected)
                await pilot.pause()

            first = sampler.next()
            await push(first)
            await push(sampler.next())
            repaints.clear()
            await push(replace(app.sample))  # equal content
            assert repaints == []

            def drawn(panel: TextPanel) -> list[tuple[str, list[Any]]]:
                return [(line.plain, line.spans) for line in panel._text]

            before = {panel.id: drawn(panel) for panel in app.query(TextPanel)}
            await push(sampler.next())  # the cores' utilization moves on
            assert repaints and not any(layout for _, _, layout in repaints)
            assert {panel for panel, _, _ in repaints} == {"grid", "core-bar"}  # the FakeDaemon moves only these
            assert len(repaints) == 2  # one request per panel
            for panel in app.query(TextPanel):  # the repainted rows are exactly the lines that changed
                rows = {y for pid, regions, _ in repaints if pid == panel.id for r in regions for y in r.line_range}
                was, now = before[panel.id], drawn(panel)
                assert rows == {y for y, line in enumerate(now) if y >= len(was) or line != was[y]}
            total = sum(len(p._text) for p in app.query(TextPanel) if p.display)
            assert sum(r.height for _, regions, _ in repaints for r in regions) < total / 2
            for panel in app.query(TextPanel):
                if panel.display and panel.size.width:
                    drawn = [panel.render_line(y).text.rstrip() for y in range(len(panel._text))]
                    assert drawn == [line.plain.rstrip() for line in panel.lines(panel.size.width)], panel.id

    asyncio.run(scenario())


class GrowingDaemon(FakeDaemon):
    """A FakeDaemon whose processes' tensors can grow (``grow``: pid -> extra bytes per core)."""

    def __init__(self, instance_type: str, apps: Sequence[FakeApp]) -> None:
        super().__init__(instance_type, apps)
        self.grow: dict[int, int] = {}

    def snapshot(self) -> dict[str, Any]:
        snap = super().snapshot()
        for proc in snap["processes"]:
            for usage in proc["memory"]["cores"].values():
                usage["tensors"] += self.grow.get(proc["pid"], 0)
        return snap


def test_a_32_process_job_is_redone_only_where_it_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPT3-6.7B TP8xDP4 on a trn1.32xlarge is 32 processes, one core and its loaded models each,
    whose counters change every second and whose memory rarely does. A refresh parses and builds
    again only the memory that changed (snapshot -> memory tree), and asks only the sections whose
    figures changed for new lines (the CPU target rests on this: benchmarks/top_cpu.py measured 6 %
    of a core when all of it was redone every second)."""
    from collections import Counter

    from neurontools.top import memory_tree

    calls: Counter[str] = Counter()

    def count(module: Any, name: str) -> None:
        original = getattr(module, name)

        def counting(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, counting)

    count(memory_tree, "_core_node")  # a core's subtree of the Memory Usage Details tree

    apps = [
        FakeApp(9000 + core, f"gpt3-6.7b-rank{core}", "python -m replay", (core,), {core: 0.92}, {core: 4e13})
        for core in range(32)
    ]
    daemon = GrowingDaemon("trn1.32xlarge", apps)
    source = DaemonSource(daemon, VERSION)
    sampler = Sampler(source, VERSION)

    def models_parsed() -> int:  # processes whose loaded models were parsed from a snapshot (one model each)
        return source.parser.parsed["loaded_models"] - 1  # less the retired totals' (pid 0), parsed once too

    async def scenario() -> None:
        feed = QueueFeed()
        app = NeuronTopApp(feed, 0.02)
        async with app.run_test(size=(120, 40)) as pilot:

            async def push() -> None:
                expected = app.samples_applied + 1
                feed.queue.put(sampler.next())
                await until(pilot, lambda: app.samples_applied >= expected)
                await pilot.pause()

            for _ in range(3):
                await push()
            assert len(app.sample.apps) == 32 and models_parsed() == 32  # parsed once, at the start
            panels = list(app.query(TextPanel))
            made = {panel.id: panel.lines_made for panel in panels}
            calls.clear()
            await push()  # the counters moved on, the memory did not
            assert calls == Counter() and models_parsed() == 32 and source.parser.parsed["memory"] == 32 + 1
            # (the vCPU shares are the period's, unrounded: the fake's constant CPU rates differ in
            # their last bits from one second to the next, the screen's figures do not)
            remade = {panel.id for panel in panels if panel.lines_made != made[panel.id]}
            assert {"grid", "core-bar"} <= remade <= {"grid", "core-bar", "vcpu"}
            daemon.grow[9005] = 64 * MB  # one process allocates: only its part is done again
            await push()
            assert calls == Counter({"_core_node": 1}) and models_parsed() == 32
            assert source.parser.parsed["memory"] == 33 + 1  # the one process's memory, parsed again
            assert app.tree.nodes == build_tree(app.sample, None)  # the reused subtrees are the right ones
            grown = next(node for node in app.tree.nodes[2].children if node.label == "NC 1")
            assert grown.device_bytes == sum(_core_memory(5).values()) + 64 * MB

    asyncio.run(scenario())


def test_history_view_keeps_what_rings_kept() -> None:
    """The histories (one shared frame per sample) read as per-(tab, core) rings of the last 60
    values would: a history starts at its core's first known value, gaps stay, a process that
    leaves takes its histories with it and starts afresh when its PID comes back."""
    from neurontools.top.history import UtilizationHistory
    from neurontools.top.model import AppSample, CoreStat

    def sample(step: int, pids: Sequence[int]) -> Sample:
        apps = tuple(
            AppSample(
                pid=pid,
                tag=str(pid),
                cores=(pid % 4,),
                core_stats={pid % 4: CoreStat(utilization=(step % 7 + pid) / 100 if step > pid else None, flops=0.0)},
            )
            for pid in pids
        )
        return Sample(tools_version=VERSION, device_count=2, cores_per_device=2, apps=apps)

    rings: dict[tuple[int | None, int], list[float | None]] = {}
    history = UtilizationHistory(length=5)
    recorded = []
    for step in range(30):
        if step in (9, 10, 20):  # the source was unreachable
            view = history.record_gap()
            for ring in rings.values():
                ring.append(None)
        else:
            pids = [1, 2] if step < 12 or step > 16 else [2, 3]  # 1 leaves for a while, 3 comes and goes
            current = sample(step, pids)
            for pid in [None, *pids]:
                for core, value in enumerate(core_values(current, pid, 4)):
                    if (pid, core) in rings or value.utilization is not None:
                        rings.setdefault((pid, core), []).append(value.utilization)
            rings = {key: ring for key, ring in rings.items() if key[0] in (None, *pids)}
            view = history.record(current)
        recorded.append((view, {key: tuple(ring[-5:]) for key, ring in rings.items()}))
    for step, (view, expected) in enumerate(recorded):  # also after later samples: a view never changes
        assert dict(view) == expected, step
        assert all(view.get(key) == values for key, values in expected.items())


def test_wide_labels_keep_columns_aligned() -> None:
    """A core at 100 % ("[100.00%]") and a process using more than one vCPU ("[173.68%, ...]")
    take room from their bars: every row keeps its width and the columns stay in place."""
    from neurontools.top.model import CoreStat
    from neurontools.top.widgets.core_grid import CoreGrid
    from neurontools.top.widgets.vcpu import VcpuPanel

    base = fake_sample("trn1.32xlarge", 12)
    first = base.apps[0]
    stats = {core: CoreStat(utilization=1.0, flops=1e12) for core in first.cores or ()}
    sample = replace(base, apps=(replace(first, core_stats=stats, vcpu=(1.7368, 0.2462)), *base.apps[1:]))
    grid, vcpu = CoreGrid(), VcpuPanel()
    for panel in (grid, vcpu):
        panel.sample, panel.state = sample, replace(panel.state, pid=first.pid)
    lines = [line.plain for line in grid.lines(160)[1:]]
    rows = [f"ND{part}".rstrip() for line in lines for part in line.split("ND") if part]  # one per device
    full = [row for row in rows if "[100.00%]" in row]
    other = [row for row in rows if "[100.00%]" not in row]
    assert full and other

    def columns(row: str) -> list[int]:
        return [i for i, ch in enumerate(row) if ch in "]/"]  # label ends and the HBM column

    assert {tuple(columns(row)) for row in rows} == {tuple(columns(other[0]))}
    assert {len(row) for row in rows} == {len(other[0])}
    cpu = [line.plain for line in vcpu.lines(120)]
    assert "[173.68%,24.62%]" in cpu[1]
    assert [len(row) for row in cpu] == [119, 119] and cpu[0].rindex("|") == cpu[1].rindex("|")


def test_process_tab_shows_only_that_process() -> None:
    async def scenario() -> None:
        sample = fake_sample("trn1.2xlarge", 2)
        async with running(sample, (120, 40)) as (app, pilot):
            await pilot.press("2")
            text = screen_text(app)
            util0 = 87.42 * _ramp(2)
            assert f"NeuronCore v2 Utilization (Avg: {util0 / 2:.2f}%)" in text
            assert f"[{util0:5.2f}%]" in text and "[ 0.00%]" in text
            assert "Runtime vCPU Usage" in text and "[11.84%, 2.31%]" in text
            assert f"Device Used Memory  Total: {formats.fmt_bytes(sum(_core_memory(0).values()))}" in text

    asyncio.run(scenario())


def test_flops_and_engine_views() -> None:
    async def scenario() -> None:
        sample = fake_sample("trn1.32xlarge", 3)
        async with running(sample, (160, 60)) as (app, pilot):
            await pilot.press("f")
            text = screen_text(app)
            flops = [v.flops for v in core_values(sample, None, 32)]
            avg, total = sum(flops) / 32, sum(flops)
            assert f"NeuronCore v2 Utilization ({formats.fmt_avg_total_tflops(avg, total)})" in text
            assert formats.fmt_tflops_cell(flops[0]) in text and "[  0.000TF]" in text
            await pilot.press("F")  # the user guide writes the key as F
            util = [v.utilization for v in core_values(sample, None, 32)]
            assert f"NeuronCore v2 Utilization ({formats.fmt_avg_percent(sum(util) / 32)})" in screen_text(app)
            await pilot.press("f")
            await pilot.press("f", "e")
            text = screen_text(app)
            assert "Engine Utilization (TensorE / VectorE / ScalarE / GpSimd / DMA)" in text
            assert "TensorE  VectorE  ScalarE   GpSimd      DMA" in text
            busy = (0.55 + 0.025 * 3) * _ramp(3)
            row = next(line for line in text.splitlines() if line.startswith("ND1 NC1"))
            assert row.split()[2:7] == [formats.fmt_percent(busy * s).strip() for s in ENGINE_SHARE.values()]
            await pilot.press("e", "p")
            text = screen_text(app)
            assert "Neuron Processes" in text
            llama = next(line for line in text.splitlines() if "llama-7b" in line)
            assert (
                llama.split()[:2] == ["7001", "llama-7b"] and "0-15" in llama and llama.split()[-2:] == ["4.00", "310"]
            )

    asyncio.run(scenario())


def test_memory_tree_keys() -> None:
    async def scenario() -> None:
        sample = fake_sample("trn1.2xlarge", 2)
        async with running(sample, (120, 40)) as (app, pilot):
            tree = app.tree

            def labels() -> list[str]:
                return [("  " * r.depth) + r.node.label for r in tree.rows]

            assert labels()[:3] == ["ND 0", "  NC 0", "    2.14.227.0+2d4f85be-/tmp/neuroncc_compile_workdir/10920000"]
            assert "[-] ND 0" in screen_text(app)
            await pilot.press("enter")  # collapse the selected device
            assert labels() == ["ND 0"] and "[+] ND 0" in screen_text(app)
            await pilot.press("right", "down", "down", "enter")  # expand ND 0, go to its model, open it
            assert tree.selected_key == "nd0/nc0/m10001@4242"
            assert "      Tensors" in labels()[3]
            await pilot.press("left", "left")  # collapse the model, then go to its core
            assert tree.selected_key == "nd0/nc0"
            await pilot.press("x")  # expand everything
            assert len(tree.rows) == 1 + 2 + 2 * (1 + 4) + 2 * 5
            await pilot.press("x")  # collapse everything
            assert labels() == ["ND 0"]

    asyncio.run(scenario())


def test_history_keeps_outages_as_gaps() -> None:
    """Sparklines keep a true time axis: the seconds the daemon was away are blanks, not skipped."""
    from neurontools.top.widgets.drawing import sparkline

    sampler = Sampler(DaemonSource(FakeDaemon("trn1.2xlarge", small_apps(), down=range(4, 7)), VERSION), VERSION)
    samples = [sampler.next() for _ in range(9)]
    assert [s.error is not None for s in samples if s is not None] == [False] * 3 + [True] * 3 + [False] * 3
    history = samples[-1].history[None, 0]  # type: ignore[union-attr]
    gaps = [i for i, value in enumerate(history) if value is None]
    assert len(history) == 8 and gaps == [2, 3, 4]  # the first read has no period yet: no value
    line = sparkline(history, 10).plain
    assert line[:2] == "  " and line[4:7] == "   " and " " not in line[2:4] + line[7:]


def test_daemon_loss_shows_a_banner_keeps_the_tabs_and_recovers() -> None:
    async def scenario() -> None:
        daemon = FakeDaemon("trn1.2xlarge", small_apps(), down=range(4, 9))
        app = NeuronTopApp(Sampler(DaemonSource(daemon, VERSION), VERSION), 0.05)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.samples_applied >= 2)
            await pilot.press("3")
            await until(pilot, lambda: app.sample.error is not None)
            text = screen_text(app)
            assert "daemon unreachable at /tmp/fake-neuron-emulator.sock; retrying (connection refused)" in text
            assert "NeuronCore v2 Utilization (Avg: NA)" in text and "[    NA]" in text
            assert ">[3]:neuron app 1<" in text and app.display_state.pid == 5151
            await until(pilot, lambda: app.sample.error is None and app.sample.engines is not None)
            text = screen_text(app)
            assert "unreachable" not in text and "[    NA]" not in text
            assert app.display_state.pid == 5151
        assert daemon.registered and daemon.registered[0]["kind"] == "tool"

    asyncio.run(scenario())


# -- SVG snapshots --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("instance_type", "reads", "size", "keys"),
    [
        pytest.param("trn1.2xlarge", 12, (120, 40), (), id="trn1_2xlarge"),
        pytest.param("trn1.2xlarge", 12, (80, 24), ("f", "3"), id="trn1_2xlarge_80x24_flops_second_tab"),
        pytest.param("trn1.32xlarge", 12, (160, 60), (), id="trn1_32xlarge_full_size"),
        pytest.param("trn1.32xlarge", 12, (80, 24), (), id="trn1_32xlarge_80x24"),
        pytest.param("trn1.32xlarge", 12, (160, 50), ("e", "p"), id="engines_and_processes"),
        pytest.param("trn1.2xlarge", 40, (120, 30), ("s", "x"), id="history_sparklines"),
    ],
)
def test_snapshot(snap_compare, instance_type: str, reads: int, size: tuple[int, int], keys: tuple[str, ...]) -> None:
    """The fake daemon of ``instance_type`` after ``reads`` reads, at ``size``, after ``keys``."""
    app = NeuronTopApp(FixedFeed(fake_sample(instance_type, reads)), 60)
    assert snap_compare(app, terminal_size=size, run_before=press_after_data(*keys) if keys else wait_first())


def test_snapshot_daemon_unreachable_at_start(snap_compare) -> None:
    sample = Sample(tools_version=VERSION).unreachable(
        "daemon unreachable at /tmp/fake-neuron-emulator.sock; retrying (socket does not exist)"
    )
    assert snap_compare(NeuronTopApp(FixedFeed(sample), 60), terminal_size=(80, 24), run_before=wait_first())


def test_stdin_reports_show_na_for_what_reports_lack(snap_compare) -> None:
    report = json.loads((FIXTURES / "spec_illustrative_report.json").read_text())
    sample = replace(sample_from_report(report, VERSION), sequence=1)
    app = NeuronTopApp(FixedFeed(sample), 60)
    assert snap_compare(app, terminal_size=(100, 30), run_before=press_after_data("e", "p"))


# -- command line ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--interval", "0"], "argument --interval: 0 is out of range"),
        (["--interval", "x"], "argument --interval: invalid value 'x'"),
        (["extra"], "unrecognized arguments: extra"),
        (["--source", "ftp://x"], "expected a socket path or http://HOST:PORT"),
    ],
)
def test_bad_arguments_one_line_and_exit_1(argv: list[str], needle: str) -> None:
    result = run_tool(["neuron-top", *argv], None, timeout=30)
    assert result.returncode == 1
    assert result.stderr.startswith("neuron-top: error: ") and needle in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == ""


def test_help_version_and_no_terminal() -> None:
    assert parse_args(["--interval", "2.5", "--source", "-"]).from_stdin
    help_run = run_tool(["neuron-top", "--help"], None)
    assert help_run.returncode == 0 and "--interval SECONDS" in help_run.stdout
    no_tty = run_tool(["neuron-top"], None)  # stdout is a pipe
    assert no_tty.returncode == 1 and "not a terminal" in no_tty.stderr
    assert len(no_tty.stderr.strip().splitlines()) == 1


# -- for real: tmux, a daemon, a training process -------------------------------------------------


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_neuron_top_in_tmux_with_a_real_training_process(daemon, short_tmp: Path) -> None:
    from tests.test_training_e2e import train

    trainer = train(
        daemon.address, short_tmp, "--steps", "100000", "--width", "128", env={"NEURON_PROCESS_TAG": "toptrain"}
    )
    tmux = ["tmux", "-S", str(short_tmp / "tmux.sock")]
    try:
        assert trainer.stdout is not None and '"step": 0' in trainer.stdout.readline()
        env = tool_env(daemon.address)
        command = f"exec env NEURON_EMULATOR_ADDR={daemon.address} PATH={env['PATH']} {BIN / 'neuron-top'}"
        subprocess.run([*tmux, "new-session", "-d", "-x", "120", "-y", "40", "-s", "top", command], check=True)

        def pane() -> str:
            out = subprocess.run([*tmux, "capture-pane", "-p", "-t", "top"], capture_output=True, text=True)
            return out.stdout

        title = f"neuron-top {formats_version()} running on {SPEC_INSTANCE_IDS['trn1.2xlarge']} (trn1.2xlarge)"
        assert wait_until(lambda: title in pane() and "[2]:toptrain" in pane(), 20), pane()
        # after one period the grid has measured values, the training core is busy
        assert wait_until(lambda: "Avg: NA" not in pane() and "[    NA]" not in pane(), 10), pane()
        screen = pane()
        nd0 = next(line for line in screen.splitlines() if line.startswith("ND0 "))
        assert nd0.count("[") == 2 and "/32.0GB" in nd0
        assert "Memory Usage Details" in screen and "[-] ND 0" in screen
        listed = run_tool(["neuron-ls", "-a"], daemon.address).stdout
        assert "neuron-top" in listed  # registered as a tool while it runs
        subprocess.run([*tmux, "send-keys", "-t", "top", "2"], check=True)
        assert wait_until(lambda: ">[2]:toptrain<" in pane(), 5), pane()
        subprocess.run([*tmux, "send-keys", "-t", "top", "q"], check=True)
        gone = subprocess.run
        assert wait_until(lambda: gone([*tmux, "has-session", "-t", "top"], capture_output=True).returncode != 0, 10)
        assert wait_until(lambda: "neuron-top" not in run_tool(["neuron-ls", "-a"], daemon.address).stdout, 5)

        # the same training seen through a real neuron-monitor stream on stdin (keys still work)
        config = short_tmp / "monitor.json"
        groups = ["neuroncore_counters", "memory_used", "neuron_runtime_vcpu_usage", "execution_stats"]
        config.write_text(
            json.dumps(
                {
                    "period": "1s",
                    "neuron_runtimes": [{"tag_filter": ".*", "metrics": [{"type": g} for g in groups]}],
                    "system_metrics": [{"type": "vcpu_usage"}, {"type": "memory_info"}],
                }
            )
        )
        pipeline = f"{BIN / 'neuron-monitor'} -c {config} | {BIN / 'neuron-top'} --source -"
        command = f"export NEURON_EMULATOR_ADDR={daemon.address}; {pipeline}"
        subprocess.run([*tmux, "new-session", "-d", "-x", "120", "-y", "40", "-s", "top", command], check=True)
        assert wait_until(lambda: title in pane() and "[2]:toptrain" in pane() and "Avg: NA" not in pane(), 20), pane()
        subprocess.run([*tmux, "send-keys", "-t", "top", "e"], check=True)
        assert wait_until(lambda: "Engine Utilization" in pane(), 5), pane()
        assert "ND0 NC0          NA       NA" in pane()  # reports carry no engine times: NA, not invented
        subprocess.run([*tmux, "send-keys", "-t", "top", "q"], check=True)
        assert wait_until(lambda: gone([*tmux, "has-session", "-t", "top"], capture_output=True).returncode != 0, 10)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
        trainer.kill()
        trainer.communicate(timeout=15)


def test_neuron_top_in_tmux_survives_a_daemon_restart(short_tmp: Path) -> None:
    """The daemon stops and comes back on the same socket: a banner while it is away (keys keep
    working), then live data again and neuron-top registered with the new daemon."""
    from tests.support import start_daemon

    daemon = start_daemon(short_tmp, "trn1.2xlarge")
    tmux = ["tmux", "-S", str(short_tmp / "tmux.sock")]

    def pane() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p", "-t", "top"], capture_output=True, text=True).stdout

    try:
        env = tool_env(daemon.address)
        command = f"exec env NEURON_EMULATOR_ADDR={daemon.address} PATH={env['PATH']} {BIN / 'neuron-top'}"
        subprocess.run([*tmux, "new-session", "-d", "-x", "100", "-y", "30", "-s", "top", command], check=True)
        assert wait_until(lambda: "(trn1.2xlarge)" in pane() and "Avg: NA" not in pane(), 20), pane()
        assert wait_until(lambda: "neuron-top" in run_tool(["neuron-ls", "-a"], daemon.address).stdout, 5)
        assert daemon.stop() == 0
        assert wait_until(lambda: "daemon unreachable at" in pane() and "retrying" in pane(), 10), pane()
        assert "Avg: NA" in pane()  # nothing current is known: no stale figures
        subprocess.run([*tmux, "send-keys", "-t", "top", "f"], check=True)  # keys work meanwhile
        assert wait_until(lambda: "| Total:" in pane(), 5), pane()  # the FLOPS view, figures unknown
        daemon = start_daemon(short_tmp, "trn1.2xlarge")
        assert wait_until(lambda: "unreachable" not in pane() and "TF | Total:" in pane(), 15), pane()
        assert wait_until(lambda: "neuron-top" in run_tool(["neuron-ls", "-a"], daemon.address).stdout, 10)
        subprocess.run([*tmux, "send-keys", "-t", "top", "q"], check=True)
        gone = subprocess.run
        assert wait_until(lambda: gone([*tmux, "has-session", "-t", "top"], capture_output=True).returncode != 0, 10)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
        daemon.stop()


def formats_version() -> str:
    from neurontools import __version__

    return __version__
