"""neuron-monitor-prometheus: the official exporter's metrics from reports
(docs/reference/neuron-monitor-prometheus.md).

In-process tests feed reports to ``CompatMetrics`` and read prometheus_client's real text
exposition; CLI tests run ``neuron-monitor-prometheus`` as a process fed through a pipe and scrape
it over HTTP(S) on loopback.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import os
import queue
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from neurontools.exporter.compat import CompatMetrics
from neurontools.exporter.compat_cli import build_registry, parse_args, pump
from neurontools.exporter.compat_families import FAMILIES
from neurontools.monitor.config import parse_config
from neurontools.report.builder import build_report
from tests.monitor_configs import monitor_config
from tests.snapshots import parsed, recorded
from tests.support import free_port

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
SPEC_SAMPLE = FIXTURES / "exporter" / "spec_4_5_sample_exposition.txt"  # §Reference exposition, verbatim
SPEC_GOLDEN = FIXTURES / "exporter" / "spec_report_exposition.txt"  # ours for that report, reviewed
SPEC_CREATED = 1795302762.3617654  # the _created value of the reference sample

INSTANCE = (
    'availability_zone="us-west-2d",instance_id="i-0123456789abcdef0",instance_name="",'
    'instance_type="trn1.2xlarge",region="us-west-2"'
)
SUBNET = 'subnet_id="subnet-0123456789abcdef0"'
APP_FAMILIES = [f.name for f in FAMILIES if f.scope == "app"]


def load_report(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / "report" / f"{name}.json").read_text(encoding="utf-8"))


SPEC = load_report("spec_illustrative_report")
IDLE = load_report("spec_idle_line")


def spec(**changes: Any) -> dict[str, Any]:
    return copy.deepcopy(SPEC) | changes


def runtime_report(report: dict[str, Any]) -> dict[str, Any]:
    return report["neuron_runtime_data"][0]["report"]


class Exposition:
    """A registry holding one ``CompatMetrics``; the text prometheus_client serves for it."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("clock", lambda: SPEC_CREATED)
        self.metrics = CompatMetrics(**kwargs)
        self.registry = CollectorRegistry()
        self.registry.register(self.metrics)

    def feed(self, *reports: dict[str, Any]) -> list[str]:
        messages: list[str] = []
        for report in reports:
            messages += self.metrics.update(report)
        return messages

    def text(self) -> str:
        return generate_latest(self.registry).decode()

    def lines(self) -> list[str]:
        return self.text().splitlines()

    def samples(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        """Samples named ``name``, keyed by their sorted label pairs."""
        out = {}
        for family in text_string_to_metric_families(self.text()):
            for sample in family.samples:
                if sample.name == name:
                    out[tuple(sorted(sample.labels.items()))] = sample.value
        return out

    def value(self, name: str, **labels: str) -> float | None:
        for key, value in self.samples(name).items():
            if all(dict(key).get(k) == v for k, v in labels.items()):
                return value
        return None

    def headers(self) -> list[str]:
        return [line.split()[2] for line in self.lines() if line.startswith("# TYPE ")]


# -- the reference sample ------------------------------------------------------------------------


def test_spec_sample_lines_byte_for_byte() -> None:
    """Every line of the reference sample (the `_created` one thanks to a fixed clock), in the same order per family."""
    expo = Exposition()
    assert expo.feed(SPEC) == []
    lines = expo.lines()
    sample = SPEC_SAMPLE.read_text(encoding="utf-8").splitlines()
    assert len(sample) == 43
    missing = [line for line in sample if line not in lines]
    assert missing == []
    # within each family of the excerpt the lines keep their order, HELP then TYPE then samples
    blocks: list[list[str]] = []
    for line in sample:
        if line.startswith("# HELP "):
            blocks.append([])
        blocks[-1].append(line)
    for block in blocks:
        positions = [lines.index(line) for line in block]
        assert positions == sorted(positions)
        assert positions[1] == positions[0] + 1


def test_spec_sample_lines_with_the_real_clock_except_created_values() -> None:
    before = time.time()
    expo = Exposition(clock=time.time)
    expo.feed(SPEC)
    after = time.time()
    lines = expo.lines()
    for line in SPEC_SAMPLE.read_text(encoding="utf-8").splitlines():
        if "_created{" in line:
            name_labels = line.rsplit(" ", 1)[0]
            [ours] = [x for x in lines if x.rsplit(" ", 1)[0] == name_labels]
            assert before <= float(ours.rsplit(" ", 1)[1]) <= after
        else:
            assert line in lines


def test_full_exposition_of_the_spec_report_matches_the_golden_file() -> None:
    """Golden file reviewed against the §Metrics table (every family, creation order = the report's group order)."""
    expo = Exposition()
    expo.feed(SPEC)
    assert expo.text() == SPEC_GOLDEN.read_text(encoding="utf-8")


def test_every_family_of_the_table_with_its_type_help_and_labels() -> None:
    expo = Exposition()
    expo.feed(SPEC)
    families = {f.name: f for f in text_string_to_metric_families(expo.text())}
    instance = {"instance_name", "instance_id", "instance_type", "availability_zone", "region", "subnet_id"}
    for spec_family in FAMILIES:
        # the parser names counters without _total and info families without _info
        key = spec_family.name.removesuffix("_total").removesuffix("_info")
        family = families.get(key) or families[spec_family.name]
        assert family.documentation == spec_family.help
        assert family.type == {"info": "gauge"}.get(spec_family.kind, spec_family.kind)
        assert family.samples, spec_family.name
        tag = {"runtime_tag"} if spec_family.scope == "app" else set()
        for sample in family.samples:
            assert set(sample.labels) == instance | tag | set(spec_family.labels), sample
    assert expo.value("neuroncore_memory_usage_model_code", neuroncore="1", memory_location="None") == 52428800.0
    assert expo.value("neuron_runtime_memory_used_bytes", memory_location="neuron_device") == 5685379072.0
    assert expo.value("execution_latency_seconds", percentile="p100") == 0.089310408
    assert expo.value("system_swap_used_bytes") == 0.0
    assert expo.value("system_memory_used_bytes") == 9876543488.0
    assert len(expo.samples("execution_latency_seconds")) == 7
    assert len(expo.samples("hardware_ecc_events_total")) == 4
    assert len(expo.samples("execution_errors_total")) == 6


def test_report_built_from_daemon_snapshots_gives_the_same_exposition() -> None:
    """The other input path: reports our builder makes from two daemon snapshots (the reference report, computed)."""
    config = parse_config(json.dumps(monitor_config("1s")))
    prev, cur = (parsed(recorded(f"trn1_2xlarge_train_{n}")) for n in ("prev", "cur"))
    expo = Exposition()
    assert expo.feed(build_report(prev, cur, config)) == []
    assert expo.text() == SPEC_GOLDEN.read_text(encoding="utf-8")


# -- counters, clearing, instance labels ------------------------------------------------------------


def _with_counts(completed: int, generic: int, mem_ecc: int) -> dict[str, Any]:
    report = spec()
    stats = runtime_report(report)["execution_stats"]
    stats["execution_summary"]["completed"] = completed
    stats["error_summary"]["generic"] = generic
    report["system_data"]["neuron_hw_counters"]["neuron_devices"][0]["mem_ecc_corrected"] = mem_ecc
    runtime_report(report)["neuroncore_counters"]["neuroncores_in_use"]["0"]["neuroncore_utilization"] = completed
    return report


def test_counters_accumulate_per_period_values_across_reports() -> None:
    clock = iter([100.0 + i for i in range(1000)])
    expo = Exposition(clock=lambda: next(clock))
    expo.feed(_with_counts(12, 0, 1))
    created = expo.samples("execution_status_created")
    expo.feed(_with_counts(5, 2, 0), _with_counts(7, 1, 2))
    assert expo.value("execution_status_total", status_type="completed") == 24.0
    assert expo.value("execution_status_total", status_type="timed_out") == 0.0
    assert expo.value("execution_errors_total", error_type="generic") == 3.0
    assert expo.value("hardware_ecc_events_total", event_type="mem_ecc_corrected", neuron_device_index="0") == 3.0
    assert expo.samples("execution_status_created") == created  # created once, at the first increment
    assert expo.value("neuroncore_utilization_ratio", neuroncore="0") == 0.07  # gauges: the last value


def test_empty_runtime_data_clears_application_series_only() -> None:
    expo = Exposition()
    expo.feed(_with_counts(12, 1, 1))
    headers = [name for name in expo.headers() if not name.endswith("_created")]
    assert expo.feed(IDLE) == []
    text = expo.text()
    for name in APP_FAMILIES:
        assert f"\n{name}{{" not in text, name  # no series left ...
    # ... but every family keeps its HELP/TYPE (registered once); `_created` blocks go with the series
    assert [name for name in expo.headers() if not name.endswith("_created")] == headers
    # system families stay; memory_info is the idle line's, ECC events keep counting
    assert expo.value("system_memory_used_bytes") == 1284890624.0
    assert expo.value("hardware_ecc_events_total", event_type="mem_ecc_corrected") == 1.0
    # a new process: its counters start from its own first period
    expo.feed(_with_counts(12, 0, 0))
    assert expo.value("execution_status_total", status_type="completed") == 12.0
    assert expo.value("execution_errors_total", error_type="generic") == 0.0


@pytest.mark.parametrize("empty", [[], None, "missing"])
def test_clearing_on_empty_null_or_missing_runtime_data(empty: Any) -> None:
    expo = Exposition()
    expo.feed(SPEC)
    idle = spec()
    if empty == "missing":
        del idle["neuron_runtime_data"]
    else:
        idle["neuron_runtime_data"] = empty
    expo.feed(idle)
    assert all(not expo.samples(name) for name in ("neuroncore_utilization_ratio", "execution_status_total"))
    assert expo.value("system_vcpu_count") == 8.0


def test_instance_labels_come_from_the_first_report_for_the_lifetime() -> None:
    expo = Exposition()
    expo.feed(SPEC, IDLE)  # the idle line is another instance (i-0421ea5496c852415)
    assert "i-0421ea5496c852415" not in expo.text()
    assert f"instance_info{{{INSTANCE},{SUBNET}}} 1.0" in expo.lines()
    assert expo.metrics.instance_labels == {
        "instance_name": "",
        "instance_id": "i-0123456789abcdef0",
        "instance_type": "trn1.2xlarge",
        "availability_zone": "us-west-2d",
        "region": "us-west-2",
        "subnet_id": "subnet-0123456789abcdef0",
    }
    fresh = Exposition()
    fresh.feed(IDLE, SPEC)
    assert "i-0123456789abcdef0" not in fresh.text()
    assert 'runtime_tag="4242"' in fresh.text()


def test_ultraserver_id_label_when_present() -> None:
    report = spec()
    report["instance_info"]["ultraserver_id"] = "u-cafb07773a569a23"
    expo = Exposition()
    expo.feed(report)
    for name in ("neuroncore_utilization_ratio", "system_vcpu_count", "instance_info", "neuron_hardware_info"):
        assert all(dict(key)["ultraserver_id"] == "u-cafb07773a569a23" for key in expo.samples(name))


def test_prune_exited_option_drops_series_of_missing_tags() -> None:
    two = spec()
    other = copy.deepcopy(two["neuron_runtime_data"][0]) | {"pid": 5000, "neuron_runtime_tag": "job-b"}
    two["neuron_runtime_data"].append(other)
    one = spec()
    official, pruning = Exposition(), Exposition(prune_exited=True)
    for expo in (official, pruning):
        expo.feed(two, one)
    assert official.value("neuroncore_utilization_ratio", runtime_tag="job-b") == 0.8742  # stale, as the official
    assert pruning.value("neuroncore_utilization_ratio", runtime_tag="job-b") is None
    assert pruning.value("execution_status_total", runtime_tag="job-b") is None
    assert pruning.value("neuroncore_utilization_ratio", runtime_tag="4242") == 0.8742


# -- processing rules -------------------------------------------------------------------------------


def test_group_and_runtime_errors_are_skipped_with_the_official_messages() -> None:
    report = spec()
    runtime_report(report)["neuron_runtime_vcpu_usage"]["error"] = "open /proc/457402/stat: no such file or directory"
    report["system_data"]["memory_info"]["error"] = "cannot read /proc/meminfo"
    failed = copy.deepcopy(report["neuron_runtime_data"][0]) | {"neuron_runtime_tag": "job-b", "error": "timed out"}
    report["neuron_runtime_data"].append(failed)
    expo = Exposition()
    assert expo.feed(report) == [
        "Error getting neuron_runtime_vcpu_usage for runtime tag 4242: "
        "open /proc/457402/stat: no such file or directory",
        "Runtime job-b error: timed out",
        "Error getting memory_info: cannot read /proc/meminfo",
    ]
    headers = expo.headers()
    assert "neuron_runtime_vcpu_usage_ratio" not in headers
    assert "system_memory_total_bytes" not in headers
    assert "job-b" not in expo.text()
    assert expo.value("neuroncore_utilization_ratio", runtime_tag="4242", neuroncore="1") == 0.8697
    # the erroring group keeps its last good values
    expo.feed(SPEC, report)
    assert expo.value("neuron_runtime_vcpu_usage_ratio", usage_type="system") == 0.0231


def test_unknown_groups_ignored_and_null_latency_exports_no_percentile() -> None:
    report = spec()
    runtime_report(report)["inference_stats"] = {"period": 1.0, "error": ""}  # 1.x name: not handled
    runtime_report(report)["execution_stats"]["latency_stats"] = {"total_latency": None, "device_latency": None}
    report["system_data"]["future_group"] = {"period": 1.0, "value": 3, "error": "x"}
    expo = Exposition()
    assert expo.feed(report) == []
    assert "execution_latency_seconds" in expo.headers()  # family created, as the official does
    assert expo.samples("execution_latency_seconds") == {}
    assert "inference" not in expo.text()


@pytest.mark.parametrize(
    ("average", "user", "system"),
    [
        ({"user": 14.16, "nice": 0, "system": 3.11, "io_wait": 0, "irq": 0, "soft_irq": 0}, 0.1416, 0.0311),
        ({"user": 10, "nice": 5, "system": 1, "io_wait": 2, "irq": 0.5, "soft_irq": 0.5}, 0.15, 0.04),
        ({"user": 90, "nice": 20, "system": 60, "io_wait": 30, "irq": 15, "soft_irq": 10}, 1.0, 1.0),
    ],
)
def test_system_vcpu_usage_aggregation_and_cap(average: dict[str, float], user: float, system: float) -> None:
    report = spec()
    report["system_data"]["vcpu_usage"]["average_usage"] = average | {"idle": 0}
    expo = Exposition()
    expo.feed(report)
    assert expo.value("system_vcpu_usage_ratio", usage_type="user") == pytest.approx(user, abs=1e-12)
    assert expo.value("system_vcpu_usage_ratio", usage_type="system") == pytest.approx(system, abs=1e-12)


def test_hardware_info_from_the_first_report_without_error_created_once() -> None:
    broken = spec()
    broken["neuron_hardware_info"] = {"neuron_device_count": 0, "neuroncore_per_device_count": 0, "error": "no driver"}
    older = spec()
    older["neuron_hardware_info"] = {"neuron_device_count": 16, "neuroncore_per_device_count": 2, "error": ""}
    expo = Exposition()
    assert expo.feed(broken) == ["Error getting neuron_hardware_info: no driver"]
    assert "neuron_hardware_info" not in expo.headers()
    assert expo.feed(older, SPEC) == []
    [line] = [x for x in expo.lines() if x.startswith("neuron_hardware_info{")]
    assert line == (
        'neuron_hardware_info{availability_zone="us-west-2d",instance_id="i-0123456789abcdef0",instance_name="",'
        'instance_type="trn1.2xlarge",neuron_device_count="16",neuroncore_per_device_count="2",region="us-west-2",'
        'subnet_id="subnet-0123456789abcdef0"} 1.0'
    )
    assert expo.headers()[-2:] == ["instance_info", "neuron_hardware_info"]


def test_malformed_group_is_skipped_whole_with_a_message() -> None:
    report = spec()
    runtime_report(report)["memory_used"]["neuron_runtime_used_bytes"]["usage_breakdown"]["neuroncore_memory_usage"][
        "1"
    ]["tensors"] = "lots"
    del report["system_data"]["memory_info"]["swap_used_bytes"]
    runtime_report(report)["execution_stats"]["execution_summary"]["completed"] = -1
    expo = Exposition()
    assert expo.feed(report) == [
        "Invalid execution_stats for runtime tag 4242: expected a non-negative count, got -1",
        "Invalid memory_used for runtime tag 4242: expected a number, got 'lots'",
        "Invalid memory_info: missing key 'swap_used_bytes'",
    ]
    headers = expo.headers()
    for name in ("neuron_runtime_memory_used_bytes", "execution_errors_total", "system_memory_total_bytes"):
        assert name not in headers  # no partial update
    assert expo.value("neuroncore_utilization_ratio", neuroncore="0") == 0.8742


def test_older_report_shapes_are_accepted() -> None:
    """Pre-2.5 memory_used (totals only) and devices without sram_ecc_corrected (older tools)."""
    report = spec()
    used = runtime_report(report)["memory_used"]["neuron_runtime_used_bytes"]
    del used["usage_breakdown"]
    del report["system_data"]["neuron_hw_counters"]["neuron_devices"][0]["sram_ecc_corrected"]
    expo = Exposition()
    assert expo.feed(report) == []
    assert expo.value("neuron_runtime_memory_used_bytes", memory_location="host") == 2168455168.0
    assert "neuroncore_memory_usage_tensors" not in expo.headers()
    assert len(expo.samples("hardware_ecc_events_total")) == 3


def test_invalid_top_level_shapes_give_messages_not_exceptions() -> None:
    expo = Exposition()
    assert expo.feed([1, 2]) == ["Invalid report: expected a JSON object, got list"]  # type: ignore[arg-type]
    assert expo.feed({"neuron_runtime_data": {"a": 1}}) == ["Invalid report: neuron_runtime_data is not an array"]
    assert expo.feed({"neuron_runtime_data": [{"pid": 1}], "system_data": []}) == [
        "Invalid report: a neuron_runtime_data entry has no neuron_runtime_tag",
        "Invalid report: system_data is not an object",
    ]


def test_name_filtering_works_before_and_after_the_first_report() -> None:
    expo = Exposition()
    assert generate_latest(expo.registry.restricted_registry(["neuroncore_utilization_ratio"])) == b""
    expo.feed(SPEC)
    text = generate_latest(expo.registry.restricted_registry(["neuroncore_utilization_ratio"])).decode()
    assert text.count("\nneuroncore_utilization_ratio{") == 2
    assert "system_vcpu_count" not in text


def test_created_series_can_be_disabled_like_prometheus_client() -> None:
    expo = Exposition(created_series=False)
    expo.feed(SPEC)
    assert "_created" not in expo.text()
    assert expo.value("execution_status_total", status_type="completed") == 12.0


def test_pump_decodes_lines_and_routes_messages() -> None:
    import io

    out, err = io.StringIO(), io.StringIO()
    bad = dict(spec(), neuron_runtime_data=[{"neuron_runtime_tag": "7", "error": "gone", "pid": 7}])
    lines = [b"not json\n", b"\n", json.dumps(SPEC).encode() + b"\n", b"42\n", json.dumps(bad).encode() + b"\n"]
    metrics = CompatMetrics()
    assert pump(lines, metrics, out, err) == 2
    assert out.getvalue().splitlines() == [
        "Unable to decode JSON Expecting value: line 1 column 1 (char 0)",
        "Unable to decode JSON expected a report object, got a JSON number",
    ]
    assert err.getvalue().splitlines() == ["Runtime 7 error: gone"]


# -- promtool ---------------------------------------------------------------------------------------

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
# The official names break one promtool lint rule; they must stay as they are (drop-in).
EXPECTED_LINT = ['system_vcpu_count non-histogram and non-summary metrics should not have "_count" suffix']


@pytest.mark.skipif(not os.path.exists(PROMTOOL), reason="promtool not installed")
@pytest.mark.parametrize("reports", [["SPEC"], ["SPEC", "IDLE"]], ids=["busy", "after-idle"])
def test_promtool_check_metrics(reports: list[str]) -> None:
    metrics = CompatMetrics()
    registry = build_registry(metrics)
    for name in reports:
        metrics.update({"SPEC": SPEC, "IDLE": IDLE}[name])
    text = generate_latest(registry).decode()
    assert "python_gc_objects_collected_total" in text and "process_cpu_seconds_total" in text
    result = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    problems = (result.stdout + result.stderr).splitlines()
    assert problems == EXPECTED_LINT
    assert result.returncode == 3  # lint problems only, no format error (that would be 1)


# -- the command ------------------------------------------------------------------------------------


def test_parse_args_defaults_are_the_official_ones() -> None:
    opts = parse_args([])
    assert (opts.port, opts.bind, opts.key_file, opts.cert_file) == (8000, "0.0.0.0", None, None)
    assert parse_args(["-p", "9100", "--bind", "127.0.0.1"]).port == 9100
    assert parse_args(["--port=0"]).port == 0


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Exporter:
    """``neuron-monitor-prometheus`` as a process: stdin is a pipe, stdout/stderr lines are queued."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "neurontools.exporter.compat_cli", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(),
            cwd=ROOT,
        )
        self.out: queue.Queue[str] = queue.Queue()
        self.err_lines: list[str] = []
        threading.Thread(target=self._read, args=(self.proc.stdout, self.out.put), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, self.err_lines.append), daemon=True).start()
        self.port = 0

    @staticmethod
    def _read(stream: Any, sink: Any) -> None:
        for raw in stream:
            sink(raw.decode("utf-8", "replace").rstrip("\n"))

    def line(self, timeout: float = 15) -> str:
        return self.out.get(timeout=timeout)

    def started(self, scheme: str = "HTTP") -> Exporter:
        first = self.line()
        prefix = f"Running {scheme} prometheus server at port "
        assert first.startswith(prefix), (first, self.err_lines)
        self.port = int(first.removeprefix(prefix))
        return self

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode() + b"\n")
        self.proc.stdin.flush()

    def send_report(self, report: dict[str, Any]) -> None:
        self.send(json.dumps(report, separators=(",", ":")))

    def scrape(self, path: str = "/metrics", context: ssl.SSLContext | None = None) -> str:
        scheme = "https" if context is not None else "http"
        with urllib.request.urlopen(f"{scheme}://127.0.0.1:{self.port}{path}", timeout=10, context=context) as resp:
            assert resp.status == 200
            return resp.read().decode()

    def wait_for(self, needle: str, path: str = "/metrics", context: ssl.SSLContext | None = None) -> str:
        deadline = time.monotonic() + 15
        while True:
            text = self.scrape(path, context)
            if needle in text:
                return text
            assert time.monotonic() < deadline, f"{needle!r} never appeared"
            time.sleep(0.05)

    def stop(self, signum: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        try:
            return self.proc.wait(timeout=15)
        finally:
            time.sleep(0.05)  # let the reader threads drain

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=15)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(OSError):
                stream.close()  # type: ignore[union-attr]


@pytest.fixture
def exporters() -> Iterator[list[Exporter]]:
    started: list[Exporter] = []
    yield started
    for exporter in started:
        exporter.kill()


def start(exporters: list[Exporter], *args: str, scheme: str = "HTTP") -> Exporter:
    exporter = Exporter(*args)
    exporters.append(exporter)
    return exporter.started(scheme)


def completed(text: str) -> float:
    prefix = f'execution_status_total{{{INSTANCE},runtime_tag="4242",status_type="completed",{SUBNET}}} '
    [line] = [x for x in text.splitlines() if x.startswith(prefix)]
    return float(line.removeprefix(prefix))


def test_cli_serves_reports_skips_bad_lines_and_keeps_serving(exporters: list[Exporter]) -> None:
    exp = start(exporters, "-p", "0", "--bind", "127.0.0.1")
    exp.send_report(SPEC)
    text = exp.wait_for("neuroncore_utilization_ratio{")
    for line in SPEC_SAMPLE.read_text(encoding="utf-8").splitlines():
        if "_created{" not in line:
            assert line in text.splitlines()
    for default in ("python_gc_objects_collected_total", "python_info{", "process_cpu_seconds_total"):
        assert default in text
    assert exp.scrape("/").count("neuroncore_utilization_ratio{") == 2  # any path
    assert exp.scrape("/metrics?name[]=system_vcpu_count").count("\n") == 3

    exp.send("{this is not json")
    assert (
        exp.line()
        == "Unable to decode JSON Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
    )
    exp.send_report(dict(spec(), neuron_runtime_data=[{"pid": 9, "neuron_runtime_tag": "9", "error": "gone"}]))
    exp.send_report(SPEC)
    assert completed(exp.wait_for('status_type="completed",' + SUBNET + "} 24.0")) == 24.0

    exp.proc.stdin.close()  # type: ignore[union-attr]
    deadline = time.monotonic() + 15
    while not any("end of input" in line for line in exp.err_lines):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert completed(exp.scrape()) == 24.0  # still serving the last values after EOF
    assert exp.stop(signal.SIGTERM) == 0
    assert exp.err_lines == [
        "Runtime 9 error: gone",
        "neuron-monitor-prometheus: end of input; serving the last values until interrupted",
    ]
    assert exp.out.empty()


def test_cli_sigint_while_reading_exits_0_quietly(exporters: list[Exporter]) -> None:
    exp = start(exporters, "--port=0", "--bind=127.0.0.1")
    exp.send_report(IDLE)
    exp.wait_for("system_memory_total_bytes{")
    assert exp.stop(signal.SIGINT) == 0
    assert exp.err_lines == []


def test_cli_explicit_port_and_port_in_use(exporters: list[Exporter]) -> None:
    port = free_port()
    exp = start(exporters, "-p", str(port), "--bind", "127.0.0.1")
    assert exp.port == port
    second = Exporter("-p", str(port), "--bind", "127.0.0.1")
    exporters.append(second)
    assert second.proc.wait(timeout=15) == 1
    time.sleep(0.1)
    assert second.err_lines == [
        f"neuron-monitor-prometheus: error: cannot listen on 127.0.0.1 port {port}: [Errno 98] Address already in use"
    ]
    assert second.out.empty()


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--port", "abc"], 2, "argument -p/--port: invalid port 'abc' (expected an integer 0-65535)"),
        (["-p", "70000"], 2, "argument -p/--port: port 70000 is out of range (expected 0-65535)"),
        (["--key-file", "k.pem"], 2, "--key-file and --cert-file must be given together"),
        (["--cert-file", "c.pem"], 2, "--key-file and --cert-file must be given together"),
        (["--bogus"], 2, "unrecognized arguments: --bogus"),
        (["extra"], 2, "unrecognized arguments: extra"),
        (["--port"], 2, "argument -p/--port: expected one argument"),
        (["--bind", "192.0.2.1", "-p", "0"], 1, "cannot listen on 192.0.2.1 port 0: [Errno 99]"),
        (["--key-file", "/nonexistent/k.pem", "--cert-file", "/nonexistent/c.pem"], 1, "cannot load the TLS"),
    ],
)
def test_cli_bad_flags_one_line_nonzero_exit(args: list[str], code: int, message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "neurontools.exporter.compat_cli", *args],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == code
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"neuron-monitor-prometheus: error: {message}")


def test_cli_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "neurontools.exporter.compat_cli", "--help"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=30,
    )
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.startswith("usage: neuron-monitor-prometheus")
    for flag in ("--port", "--bind", "--key-file", "--cert-file"):
        assert flag in result.stdout


# -- TLS --------------------------------------------------------------------------------------------


def _self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1/localhost: (cert, key) PEM files."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        subprocess.run(
            [
                *("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
                *("-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={name}"),
                *("-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
            ],
            check=True,
            capture_output=True,
        )
        return cert, key
    private = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    import ipaddress

    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(private.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(private, hashes.SHA256())
    )
    key.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _trusting(cert: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert))


def test_cli_https_with_certificate_reload(exporters: list[Exporter], tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path, "first")
    serving_cert, serving_key = tmp_path / "server.crt", tmp_path / "server.key"
    shutil.copy(cert, serving_cert)
    shutil.copy(key, serving_key)
    exp = start(exporters, "-p", "0", "--bind", "127.0.0.1", "--key-file", str(serving_key), "--cert-file",
                str(serving_cert), scheme="HTTPS")  # fmt: skip
    exp.send_report(SPEC)
    text = exp.wait_for("neuroncore_utilization_ratio{", context=_trusting(cert))
    assert "instance_info{" in text
    with pytest.raises(OSError):  # plain HTTP is refused (connection reset)
        urllib.request.urlopen(f"http://127.0.0.1:{exp.port}/metrics", timeout=5).read()

    new_cert, new_key = _self_signed(tmp_path, "second")
    shutil.copy(new_key, serving_key)
    shutil.copy(new_cert, serving_cert)
    deadline = time.monotonic() + 15
    while True:  # the watcher may see the key alone first: a failed reload keeps the old pair
        try:
            exp.scrape(context=_trusting(new_cert))
            break
        except (urllib.error.URLError, ssl.SSLError):
            assert time.monotonic() < deadline, exp.err_lines
            time.sleep(0.1)
    assert exp.line() == "Refreshing TLS certificates"
    with pytest.raises(urllib.error.URLError):
        exp.scrape(context=_trusting(cert))
    assert exp.stop() == 0
