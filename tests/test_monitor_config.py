"""neuron-monitor: configuration file and command line.

See docs/reference/neuron-monitor.md §Configuration file and §Command line.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from neurontools.monitor import cli
from neurontools.monitor.config import (
    MIN_PERIOD,
    ConfigError,
    default_config,
    load_config,
    parse_config,
    parse_duration,
)
from neurontools.sources.address import DaemonAddress
from neurontools.sources.daemon_client import DaemonError, DaemonUnavailable
from tests.snapshots import later, recorded

APP = ["execution_stats", "memory_used", "neuron_runtime_vcpu_usage", "neuroncore_counters"]

SPEC_EXAMPLE = """{
  "period": "1s",
  "neuron_runtimes": [
    {
      "tag_filter": ".*",
      "metrics": [
        { "type": "neuroncore_counters" },
        { "type": "memory_used" },
        { "type": "neuron_runtime_vcpu_usage" },
        { "type": "execution_stats" }
      ]
    }
  ],
  "system_metrics": [
    { "type": "vcpu_usage" },
    { "type": "memory_info" },
    { "period": "2s", "type": "neuron_hw_counters" }
  ]
}"""


# -- valid configurations -------------------------------------------------------------------------


def test_spec_example() -> None:
    cfg = parse_config(SPEC_EXAMPLE)
    assert cfg.period == 1.0
    assert cfg.periods() == {
        (0, "neuroncore_counters"): 1.0,
        (0, "memory_used"): 1.0,
        (0, "neuron_runtime_vcpu_usage"): 1.0,
        (0, "execution_stats"): 1.0,
        (None, "vcpu_usage"): 1.0,
        (None, "memory_info"): 1.0,
        (None, "neuron_hw_counters"): 2.0,
    }
    assert cfg.runtime_for("4242") == 0


def test_default_config_is_the_documented_one() -> None:
    cfg = default_config()
    assert cfg.period == 5.0
    assert sorted(t for r, t in cfg.group_keys() if r is not None) == APP
    assert [t for r, t in cfg.group_keys() if r is None] == ["vcpu_usage", "memory_info"]
    assert set(cfg.periods().values()) == {5.0}
    assert cfg.runtime_for("anything") == 0 and cfg.runtime_for("") == 0


def test_most_specific_period_wins() -> None:
    cfg = parse_config(
        json.dumps(
            {
                "period": "10s",
                "neuron_runtimes": [
                    {
                        "period": "2s",
                        "metrics": [{"type": "memory_used"}, {"type": "execution_stats", "period": "500ms"}],
                    },
                    {"tag_filter": "x", "metrics": [{"type": "memory_used"}]},
                ],
                "system_metrics": [{"type": "memory_info"}, {"type": "vcpu_usage", "period": "1m30s"}],
            }
        )
    )
    assert cfg.periods() == {
        (0, "memory_used"): 2.0,
        (0, "execution_stats"): 0.5,
        (1, "memory_used"): 10.0,
        (None, "memory_info"): 10.0,
        (None, "vcpu_usage"): 90.0,
    }


def test_empty_and_partial_configs() -> None:
    assert parse_config("{}").groups == () and parse_config("{}").period == 5.0
    cfg = parse_config('{"neuron_runtimes": [{}]}')
    assert cfg.group_keys() == () and cfg.runtime_for("7") == 0
    assert parse_config('{"system_metrics": []}').groups == ()


def test_tag_filter_is_an_unanchored_search() -> None:
    cfg = parse_config('{"neuron_runtimes": [{"tag_filter": "^bert-"}, {"tag_filter": "gpt\\\\d+"}]}')
    assert cfg.runtime_for("bert-large") == 0
    assert cfg.runtime_for("my-gpt2-run") == 1
    assert cfg.runtime_for("llama") is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1.0),
        ("500ms", 0.5),
        ("100ms", 0.1),
        ("1m30s", 90.0),
        ("2h", 7200.0),
        ("1.5s", 1.5),
        (".5s", 0.5),
        ("+3s", 3.0),
        ("1h2m3.25s", 3723.25),
        ("250000us", 0.25),
        ("250000µs", 0.25),
        ("300000000ns", 0.3),
    ],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert parse_config(json.dumps({"period": text})).period == seconds


# -- invalid configurations: one line naming the problem and where -------------------------------


def app(*metrics: dict[str, Any], **entry: Any) -> dict[str, Any]:
    return {"neuron_runtimes": [{**entry, "metrics": list(metrics)}]}


INVALID: list[tuple[Any, str]] = [
    ({"period": ""}, 'period: invalid duration ""'),
    ({"period": "5"}, 'period: invalid duration "5": missing unit (use e.g. "5s", "500ms", "1m30s")'),
    ({"period": "-1s"}, 'period: duration "-1s" must be positive'),
    ({"period": "0s"}, 'period: duration "0s" must be positive'),
    ({"period": "50ms"}, 'period: duration "50ms" is shorter than the minimum period 100ms'),
    ({"period": 5}, 'period: expected a duration string such as "5s", got 5'),
    ({"period": "5 s"}, 'period: invalid duration "5 s": unknown unit " s"'),
    ({"period": "1d"}, 'period: invalid duration "1d": unknown unit "d"'),
    ({"period": "3000000h"}, 'period: invalid duration "3000000h": out of range'),
    (
        app({"type": "memory_used"}, {"type": "execution_stats"}, {"type": "foo"}),
        'neuron_runtimes[0].metrics[2].type: unknown metric group "foo" (expected one of execution_stats, '
        "memory_used, neuron_runtime_vcpu_usage, neuroncore_counters)",
    ),
    (
        app({"type": "inference_stats"}),
        'neuron_runtimes[0].metrics[0].type: metric group "inference_stats" was renamed to "execution_stats" '
        "in Neuron 2.5",
    ),
    (
        app({"type": "vcpu_usage"}),
        'neuron_runtimes[0].metrics[0].type: "vcpu_usage" is a system-level group: list it under "system_metrics"',
    ),
    (
        {"system_metrics": [{"type": "memory_info"}, {"type": "memory_used"}]},
        'system_metrics[1].type: "memory_used" is an application-level group: '
        'list it under "neuron_runtimes[].metrics"',
    ),
    (
        {"system_metrics": [{"type": "gpu_usage"}]},
        'system_metrics[0].type: unknown metric group "gpu_usage" '
        "(expected one of memory_info, neuron_hw_counters, vcpu_usage, k8s_info)",
    ),
    (
        {"system_metrics": [{"type": "vcpu_usage"}, {"type": "vcpu_usage"}]},
        'system_metrics[1].type: metric group "vcpu_usage" already listed at system_metrics[0]',
    ),
    ({"system_metrics": [{"period": "1s"}]}, 'system_metrics[0]: missing key "type"'),
    ({"system_metrics": [{"type": 3}]}, "system_metrics[0].type: expected a metric group name, got 3"),
    ({"system_metrics": ["vcpu_usage"]}, "system_metrics[0]: expected an object, got a string"),
    ({"system_metrics": {"type": "vcpu_usage"}}, "system_metrics: expected an array, got an object"),
    (
        {"system_metrics": [{"type": "vcpu_usage", "interval": "1s"}]},
        'system_metrics[0]: unknown key "interval" (allowed: type, period)',
    ),
    ({"periods": "1s"}, 'unknown key "periods" (allowed: period, neuron_runtimes, system_metrics)'),
    (
        {"neuron_runtimes": [{"tag_filter": "(", "metrics": []}]},
        'neuron_runtimes[0].tag_filter: invalid regular expression "(": '
        "missing ), unterminated subpattern at position 0",
    ),
    (
        {"neuron_runtimes": [{"tag_filter": 42}]},
        "neuron_runtimes[0].tag_filter: expected a regular expression string, got 42",
    ),
    (
        {"neuron_runtimes": [{}, {"address": "unix:/run/neuron.sock"}]},
        'neuron_runtimes[1]: unknown key "address" (allowed: tag_filter, period, metrics)',
    ),
    (
        app({"type": "memory_used", "period": "1x"}),
        'neuron_runtimes[0].metrics[0].period: invalid duration "1x": unknown unit "x"',
    ),
    (
        app({"type": "memory_used"}, period="0.01s"),
        'neuron_runtimes[0].period: duration "0.01s" is shorter than the minimum period 100ms',
    ),
    ({"neuron_runtimes": "all"}, "neuron_runtimes: expected an array, got a string"),
    ([], "expected a JSON object at the top level, got an array"),
    (None, "expected a JSON object at the top level, got null"),
]


@pytest.mark.parametrize(("data", "message"), INVALID)
def test_invalid_configs(data: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(json.dumps(data))
    assert str(info.value) == message
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "not valid JSON: the file is empty"),
        ("  \n", "not valid JSON: the file is empty"),
        ("period: 1s", "not valid JSON: Expecting value (line 1 column 1)"),
        ('{"period": "1s"', "not valid JSON: Expecting ',' delimiter (line 1 column 16)"),
        ('{"period": "1s", "period": "2s"}', 'duplicate key "period"'),
    ],
)
def test_not_json(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    assert str(info.value) == message


def test_load_config_prefixes_the_file(tmp_path: Path) -> None:
    path = tmp_path / "monitor.json"
    path.write_text(SPEC_EXAMPLE)
    assert load_config(path).period == 1.0
    path.write_text('{"system_metrics": [{"type": "inference_stats"}]}')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (
        f'{path}: system_metrics[0].type: metric group "inference_stats" was renamed to "execution_stats" in Neuron 2.5'
    )
    with pytest.raises(ConfigError, match=r"missing\.json: cannot read the configuration file: No such file"):
        load_config(tmp_path / "missing.json")
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(path)


def test_minimum_period_is_documented_value() -> None:
    assert MIN_PERIOD == 0.1
    assert parse_config('{"period": "100ms"}').period == 0.1


# -- command line ---------------------------------------------------------------------------------

SNAP = recorded("trn1_2xlarge_train_prev")  # taken at daemon monotonic time 5000.0


def snapshot_at(t: float) -> dict[str, Any]:
    """The fixture snapshot as the daemon would answer at monotonic time 5000 + ``t``: core 0
    busy half the time, 10 executions and 1 s of CPU time (a quarter of it user) per second."""
    return later(SNAP, t, busy={0: 0.5}, completed=10, vcpu={"user": 0.25, "idle": 0.75})


class FakeDaemon:
    """A daemon client: snapshots follow a fake clock; failures can be scheduled."""

    def __init__(self, clock: FakeClock, fail_at: set[int] | None = None) -> None:
        self.clock = clock
        self.fail_at = fail_at or set()
        self.slow: dict[int, float] = {}  # get number -> seconds the fetch takes
        self.gets = 0
        self.since: list[float | None] = []  # latencies_since asked for, per get
        self.posts: list[tuple[str, Any]] = []
        self.deletes: list[str] = []

    def get(self, path: str) -> Any:
        if path.startswith("/processes/"):  # the daemon restarted: it forgot our registration
            raise DaemonError(404, {"error": "not found"})
        base, _, query = path.partition("?latencies_since=")
        assert base == "/snapshot"
        self.since.append(float(query) if query else None)
        self.gets += 1
        self.clock.now += self.slow.get(self.gets, 0.0)
        if self.gets in self.fail_at:
            raise DaemonUnavailable(DaemonAddress(socket_path="/tmp/fake.sock"), "connection refused")
        return snapshot_at(self.clock.now - self.clock.start)

    def post(self, path: str, body: Any) -> Any:
        self.posts.append((path, body))
        return body

    def delete(self, path: str) -> Any:
        self.deletes.append(path)
        return {}


class FakeClock:
    """Monotonic clock advanced by sleeps (plus some work time per reading); stops after N sleeps."""

    def __init__(self, stop_after: int, work: float = 0.0, stop: Callable[[], None] | None = None) -> None:
        self.start = self.now = 1000.0
        self.first: float | None = None  # the monitor's start: its first clock reading
        self.work = work
        self.sleeps: list[float] = []
        self.wakes: list[float] = []
        self.stop_after = stop_after
        self.stop = stop

    def __call__(self) -> float:
        self.now += self.work
        if self.first is None:
            self.first = self.now
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        if len(self.sleeps) >= self.stop_after:
            if self.stop is not None:
                self.stop()
            raise KeyboardInterrupt
        self.sleeps.append(seconds)
        self.now += seconds
        self.wakes.append(self.now - (self.first if self.first is not None else self.start))


def run_monitor(
    tmp_path: Path, config: dict[str, Any] | None, sleeps: int, **kw: Any
) -> tuple[int, list[Any], FakeDaemon, FakeClock]:
    clock = FakeClock(sleeps, work=kw.pop("work", 0.0), stop=kw.pop("stop", None))
    daemon = FakeDaemon(clock, kw.pop("fail_at", None))
    argv = list(kw.pop("argv", []))
    if config is not None:
        path = tmp_path / "monitor.json"
        path.write_text(json.dumps(config))
        argv += ["-c", str(path)]
    out = io.StringIO()
    code = cli.main(argv, client=daemon, stdout=out, clock=clock, sleep=clock.sleep)
    lines = out.getvalue().splitlines()
    return code, [json.loads(line) for line in lines], daemon, clock


def test_reports_one_line_per_wake_up(tmp_path: Path) -> None:
    code, reports, daemon, clock = run_monitor(tmp_path, json.loads(SPEC_EXAMPLE), sleeps=4)
    assert code == 0
    assert len(reports) == 5 and daemon.gets == 5  # first right after start, then every second
    assert clock.wakes == [1.0, 2.0, 3.0, 4.0]
    # each fetch asks only for executions after the oldest last collection (hw counters: every 2 s)
    assert daemon.since == [None, 5000.0, 5000.0, 5002.0, 5002.0]
    first, second, third = reports[:3]
    assert list(first["system_data"]) == ["memory_info"]
    assert list(first["neuron_runtime_data"][0]["report"]) == ["memory_used"]
    assert list(second["system_data"]) == ["memory_info", "vcpu_usage"]  # hw counters: every 2 s
    assert list(second["neuron_runtime_data"][0]["report"]) == APP
    assert list(third["system_data"]) == ["memory_info", "neuron_hw_counters", "vcpu_usage"]
    assert third["system_data"]["neuron_hw_counters"]["period"] == 2
    usage = second["neuron_runtime_data"][0]["report"]["neuroncore_counters"]["neuroncores_in_use"]["0"]
    assert usage["neuroncore_utilization"] == 50.0
    assert second["system_data"]["vcpu_usage"]["average_usage"]["user"] == 25.0
    assert second["neuron_runtime_data"][0]["report"]["execution_stats"]["execution_summary"]["completed"] == 10


def test_lines_are_the_exact_encoding(tmp_path: Path) -> None:
    clock = FakeClock(0)
    out = io.StringIO()
    cli.main([], client=FakeDaemon(clock), stdout=out, clock=clock, sleep=clock.sleep)
    text = out.getvalue()
    assert text.endswith("}\n") and text.count("\n") == 1
    assert text.startswith(
        '{"neuron_runtime_data":[{"pid":4242,"neuron_runtime_tag":"4242","error":"","report":{"memory_used":{"period":0,'
    )


def test_schedule_does_not_drift(tmp_path: Path) -> None:
    # every clock reading costs 7 ms of "work": wake-ups must stay on start + k * period
    config = {"period": "1s", "system_metrics": [{"type": "memory_info"}, {"type": "vcpu_usage", "period": "1500ms"}]}
    code, reports, daemon, clock = run_monitor(tmp_path, config, sleeps=8, work=0.007)
    assert code == 0
    ticks = sorted({k * 1.0 for k in range(1, 7)} | {k * 1.5 for k in range(1, 5)})
    assert [round(w, 6) for w in clock.wakes] == ticks[: len(clock.wakes)]
    assert daemon.gets == len(reports) == len(clock.wakes) + 1
    at_3s = reports[ticks.index(3.0) + 1]
    assert set(at_3s["system_data"]) == {"memory_info", "vcpu_usage"}


def test_missed_ticks_are_skipped() -> None:
    sched = cli.Schedule({(None, "a"): 1.0, (None, "b"): 2.0}, start=10.0)
    assert sched.due(10.0) == [(None, "a"), (None, "b")]
    sched.advance(sched.due(10.0), 10.0)
    assert sched.next_wake() == 11.0
    sched.advance([(None, "a")], 13.4)  # woke up late: next tick after now, on the grid
    assert sched.next_time((None, "a")) == 14.0
    assert sched.due(11.9995) == [(None, "b")]  # within the 1 ms slack


def test_registers_as_a_tool_for_its_lifetime(tmp_path: Path) -> None:
    code, _, daemon, _ = run_monitor(tmp_path, None, sleeps=1)
    assert code == 0
    (path, body), *_ = daemon.posts
    assert path == "/processes" and body["kind"] == "tool" and body["pid"] == os.getpid()
    assert body["command"] == "neuron-monitor" and body["runtime_version"] == "NA"
    assert daemon.deletes == [f"/processes/{os.getpid()}"]


def test_daemon_outage_mid_run_keeps_reporting(tmp_path: Path) -> None:
    config = {
        "period": "1s",
        "neuron_runtimes": [{"metrics": [{"type": "memory_used"}]}],
        "system_metrics": [{"type": "memory_info"}],
    }
    code, reports, daemon, _ = run_monitor(tmp_path, config, sleeps=3, fail_at={2, 3})
    assert code == 0 and len(reports) == 4
    up, down, _, back = reports
    assert up["neuron_hardware_info"]["error"] == "" and len(up["neuron_runtime_data"]) == 1
    assert down["neuron_runtime_data"] == []
    assert "connection refused" in down["neuron_hardware_info"]["error"]
    assert "connection refused" in down["system_data"]["memory_info"]["error"]
    assert back["neuron_hardware_info"]["error"] == "" and len(back["neuron_runtime_data"]) == 1
    assert back["system_data"]["memory_info"]["period"] == 3  # since the last successful collection
    assert len(daemon.posts) == 2  # registered again when the daemon came back


def test_sigterm_exits_cleanly(tmp_path: Path) -> None:
    previous = signal.getsignal(signal.SIGTERM)
    code, reports, daemon, _ = run_monitor(tmp_path, None, sleeps=1, stop=lambda: os.kill(os.getpid(), signal.SIGTERM))
    assert code == 0 and len(reports) == 2
    assert daemon.deletes  # unregistered on the way out
    assert signal.getsignal(signal.SIGTERM) == previous


def test_closed_stdout_exits_quietly() -> None:
    class Closed(io.StringIO):
        def write(self, s: str) -> int:
            raise BrokenPipeError

    clock = FakeClock(5)
    assert cli.main([], client=FakeDaemon(clock), stdout=Closed(), clock=clock, sleep=clock.sleep) == 0


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "-c, --config-file=FILE" in out and "--verbose=N" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bogus"], "neuron-monitor: error: unrecognized arguments: --bogus (see neuron-monitor --help)"),
        (["-c"], "neuron-monitor: error: argument -c/--config-file: expected one argument (see neuron-monitor --help)"),
        (
            ["--verbose", "9"],
            "neuron-monitor: error: argument --verbose: 9 is out of range (expected 0-4) (see neuron-monitor --help)",
        ),
        (
            ["--verbose=x"],
            "neuron-monitor: error: argument --verbose: invalid value 'x' (expected an integer 0-4) "
            "(see neuron-monitor --help)",
        ),
        (["extra"], "neuron-monitor: error: unrecognized arguments: extra (see neuron-monitor --help)"),
        (
            ["-c", "/nonexistent/monitor.json"],
            "neuron-monitor: error: /nonexistent/monitor.json: cannot read the configuration file: "
            "No such file or directory",
        ),
    ],
)
def test_bad_flags(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    clock = FakeClock(0)
    assert cli.main(argv, client=FakeDaemon(clock), clock=clock, sleep=clock.sleep) == 1
    captured = capsys.readouterr()
    assert captured.err == message + "\n" and captured.out == ""


def test_bad_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, reports, daemon, _ = run_monitor(tmp_path, {"system_metrics": [{"type": "inference_stats"}]}, sleeps=0)
    assert code == 1 and reports == [] and daemon.gets == 0 and daemon.posts == []
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and 'renamed to "execution_stats"' in err


def test_verbose_options_parse() -> None:
    assert cli.parse_args(["--verbose", "4", "--config-file=x.json"]) == cli.Options("x.json", 4, False)
    assert cli.parse_args(["-cx.json"]).config_file == "x.json"


def test_unexpected_daemon_answer_at_start(capsys: pytest.CaptureFixture[str]) -> None:
    class Old(FakeDaemon):
        def get(self, path: str) -> Any:
            raise DaemonError(404, {"error": "not found"})

    clock = FakeClock(0)
    daemon = Old(clock)
    assert cli.main([], client=daemon, stdout=io.StringIO(), clock=clock, sleep=clock.sleep) == 1
    assert (
        capsys.readouterr().err
        == "neuron-monitor: error: unexpected answer from the Neuron emulator daemon: not found\n"
    )
    assert daemon.deletes  # the registration is undone


def test_no_daemon_is_one_line_on_stderr(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURON_")}
    env["NEURON_EMULATOR_ADDR"] = str(tmp_path / "none.sock")
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from neurontools.monitor.cli import main; sys.exit(main())"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"neuron-monitor: error: no Neuron emulator daemon at {tmp_path / 'none.sock'}")
    assert "neuron-emulator up" in proc.stderr


def test_slow_snapshot_skips_overrun_ticks(tmp_path: Path) -> None:
    config = {"period": "1s", "system_metrics": [{"type": "memory_info"}]}
    clock = FakeClock(3)
    daemon = FakeDaemon(clock)
    daemon.slow = {2: 2.5}  # the fetch at the 1 s tick takes 2.5 s: ticks 2 s and 3 s are overrun
    (tmp_path / "m.json").write_text(json.dumps(config))
    out = io.StringIO()
    assert cli.main(["-c", str(tmp_path / "m.json")], client=daemon, stdout=out, clock=clock, sleep=clock.sleep) == 0
    assert daemon.gets == len(out.getvalue().splitlines()) == 4
    assert clock.wakes == [1.0, 4.0, 5.0]  # back on the grid, no burst of catch-up reports
