"""neuron-exporter: a real exporter process against a real daemon and a real training process.

The exporter runs as ``python -m neurontools.exporter.cli --port 0`` (the console script is the
same ``main``) and announces the address it bound on stderr.
"""

from __future__ import annotations

import itertools
import json
import math
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from neurontools.contract.snapshot import Snapshot
from neurontools.exporter.collector import Accumulator, history_values
from neurontools.exporter.fields import FAMILIES, LATENCY_BUCKETS, PER_PROCESS_FAMILIES
from neurontools.exporter.history import History
from neurontools.exporter.rest import HISTORY_METRICS
from tests.snapshots import later, parsed, recorded
from tests.support import one_clear_line, reap, run_tool, tool_env, wait_until
from tests.test_training_e2e import read_until_done, train

EXTENDED = {f.name for f in FAMILIES + PER_PROCESS_FAMILIES}
PROMTOOL = Path("/usr/bin/promtool")
try:
    import neurontools.exporter.compat  # noqa: F401

    HAVE_COMPAT = True
except ImportError:
    HAVE_COMPAT = False


# -- helpers --------------------------------------------------------------------------------------


@dataclass
class Exporter:
    proc: subprocess.Popen[str]
    url: str

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as resp:
                return resp.status, resp.read(), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), exc.headers.get("Content-Type", "")

    def json(self, path: str) -> tuple[int, object]:
        status, body, ctype = self.get(path)
        assert ctype.startswith("application/json"), (path, status, ctype, body[:200])
        return status, json.loads(body)

    def scrape(self) -> str:
        status, body, _ = self.get("/metrics")
        assert status == 200
        return body.decode()

    def samples(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        return parse(self.scrape())

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=15)


def start_exporter(address: str, *args: str) -> Exporter:
    proc = subprocess.Popen(
        [sys.executable, "-m", "neurontools.exporter.cli", "--port", "0", *args],
        env=tool_env(address),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert line.startswith("neuron-exporter: serving http://127.0.0.1:"), line + proc.stderr.read()
    url = line.split()[2].removesuffix("/metrics")
    exporter = Exporter(proc, url)
    assert wait_until(lambda: _answers(exporter), timeout=15), "exporter did not answer"
    return exporter


def _answers(exporter: Exporter) -> bool:
    try:
        return exporter.get("/healthz", timeout=1)[0] == 200
    except OSError:
        return False


def parse(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name, frozenset(s.labels.items())] = s.value
    return out


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[name, frozenset(labels.items())]


def series(samples: dict, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


def extended_only(text: str) -> str:
    """The exposition lines of the extended families (compat and default collectors left out)."""

    def family_of(name: str) -> str:
        for suffix in ("_bucket", "_count", "_sum"):
            if name.removesuffix(suffix) in EXTENDED:
                return name.removesuffix(suffix)
        return name

    kept = []
    for line in text.splitlines():
        name = line.split()[2] if line.startswith("#") else line.split("{")[0].split()[0]
        if family_of(name) in EXTENDED:
            kept.append(line)
    return "\n".join(kept) + "\n"


def promtool_check(text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PROMTOOL), "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)


def counters(samples: dict) -> dict:
    """Every sample of a counter or histogram family (must never decrease)."""
    names = {f.name for f in FAMILIES + PER_PROCESS_FAMILIES if f.kind in ("counter", "histogram")}
    return {
        key: v
        for key, v in samples.items()
        if key[0] in names or key[0].removesuffix("_bucket").removesuffix("_count").removesuffix("_sum") in names
    }


def snapshot(daemon) -> dict:
    return daemon.client.get("/snapshot")


# -- end to end -----------------------------------------------------------------------------------


def test_extended_metrics_follow_a_real_training_process(daemon, short_tmp: Path, exporters) -> None:
    exporter = start_exporter(daemon.address, "--interval", "0.2", "--per-process")
    exporters.append(exporter)
    assert wait_until(lambda: exporter.get("/readyz")[0] == 200, timeout=10)
    steps = 30
    proc = train(
        daemon.address,
        short_tmp,
        *("--meta", "--width", "4096", "--batch", "512", "--steps", str(steps), "--hold"),
        env={"NEURON_PROCESS_TAG": "trainer"},
    )
    try:
        # scrapes during training: counters never go backwards, the engines are seen busy
        seen: list[dict] = []
        assert wait_until(lambda: any(p["pid"] == proc.pid for p in daemon.processes()), timeout=30)
        while len(seen) < 200:
            seen.append(exporter.samples())
            if value(seen[-1], "neuron_executions_total", outcome="completed") >= steps:
                break
            time.sleep(0.1)
        read_until_done(proc)
        for before, after in itertools.pairwise(seen):
            for key, v in counters(before).items():
                assert after.get(key, v) >= v, key
        busiest = max(v for s in seen for v in series(s, "neuroncore_engine_utilization_ratio").values())
        assert 0 < busiest <= 1

        # the process holds its cores: the exporter's values equal the daemon's cumulative ones
        assert wait_until(
            lambda: value(exporter.samples(), "neuron_executions_total", outcome="completed") == steps, timeout=5
        )
        time.sleep(0.5)  # one more collection: nothing moves while the process idles
        snap = snapshot(daemon)
        samples = exporter.samples()
        [me] = [p for p in snap["processes"] if p["pid"] == proc.pid]
        assert me["neuroncores"] == [0, 1]
        for core in ("0", "1"):
            counters_of = me["cores"].get(core, {"busy": 0.0, "flops": 0, "engines": {}})
            labels = {"neuron_device": "0", "neuroncore": core}
            assert value(samples, "neuroncore_flops_total", **labels) == counters_of["flops"]
            assert value(samples, "neuroncore_busy_seconds_total", **labels) == pytest.approx(counters_of["busy"])
            for engine, busy in counters_of["engines"].items():
                got = value(samples, "neuroncore_engine_busy_seconds_total", engine=engine, **labels)
                assert got == pytest.approx(busy)
            assert value(samples, "neuroncore_in_use", **labels) == 1
        assert me["cores"]["0"]["flops"] > 0
        for category in ("constants", "model_code", "model_shared_scratchpad", "runtime_memory", "tensors"):
            ledger = sum(mem[category] for mem in me["memory"]["cores"].values())
            assert value(samples, "neurondevice_hbm_used_bytes", neuron_device="0", category=category) == ledger
            for core, mem in me["memory"]["cores"].items():
                labels = {"pid": str(proc.pid), "runtime_tag": "trainer", "neuroncore": core, "category": category}
                assert value(samples, "neuron_process_hbm_used_bytes", **labels) == mem[category]
        assert value(samples, "neurondevice_hbm_total_bytes", neuron_device="0") == 32 * 2**30
        assert value(samples, "neuron_executions_total", outcome="completed") == me["executions"]["completed"]
        assert value(samples, "neuron_execution_latency_seconds_count") == sum(me["executions"].values()) == steps
        assert value(samples, "neuron_execution_latency_seconds_sum") == pytest.approx(
            sum(total for _, total, _ in me["latencies"])
        )
        slowest = max(total for _, total, _ in me["latencies"])
        first_bucket_holding_all = min(b for b in LATENCY_BUCKETS if b >= slowest)
        assert value(samples, "neuron_execution_latency_seconds_bucket", le=str(first_bucket_holding_all)) == steps
        assert value(samples, "neuron_compile_cache_hits_total") == me["compile_cache"]["hits"]
        assert value(samples, "neuron_compile_cache_misses_total") == me["compile_cache"]["misses"] == 2
        assert value(samples, "neuron_runtime_processes") == 1
        assert value(samples, "neuron_exporter_source_up", source="daemon") == 1
        assert value(samples, "neuron_host_memory_total_bytes") == snap["host"]["memory"]["total"]
        assert value(samples, "neuron_host_cpu_seconds_total", mode="user") == pytest.approx(
            sum(v["user"] for v in snap["host"]["vcpus"]), abs=5.0
        )
        info = series(samples, "neuron_instance_info")
        assert [dict(labels)["instance_id"] for labels in info] == [snap["instance"]["instance_id"]]
        if HAVE_COMPAT:  # the official script's families, from reports built by the exporter
            assert (
                value(
                    samples,
                    "execution_status_total",
                    **_compat_labels(samples),
                    runtime_tag="trainer",
                    status_type="completed",
                )
                == steps
            )

        # Prometheus' own linter accepts the extended families
        lint = promtool_check(extended_only(exporter.scrape()))
        assert lint.returncode == 0 and lint.stdout == lint.stderr == "", lint.stdout + lint.stderr

        # REST, from the same collected state
        status, cores = exporter.json("/api/v1/neuroncores")
        assert status == 200 and [c["neuroncore"] for c in cores] == [0, 1]
        assert cores[0]["owner"] == {"pid": proc.pid, "runtime_tag": "trainer"}
        assert cores[0]["flops_total"] == me["cores"]["0"]["flops"]
        assert cores[0]["hbm_used_bytes"] == me["memory"]["cores"]["0"]
        assert cores[0]["utilization"] == 0.0 and cores[0]["period_seconds"] > 0  # idle now
        status, procs = exporter.json("/api/v1/processes")
        [entry] = [p for p in procs if p["pid"] == proc.pid]
        assert entry["runtime_tag"] == "trainer" and entry["executions"]["completed"] == steps
        status, report = exporter.json("/api/v1/report")
        assert [r["pid"] for r in report["neuron_runtime_data"]] == [proc.pid]
        assert set(report["neuron_runtime_data"][0]["report"]) == {
            "execution_stats",
            "memory_used",
            "neuron_runtime_vcpu_usage",
            "neuroncore_counters",
        }
        status, devices = exporter.json("/api/v1/devices")
        assert devices[0]["hbm_used_bytes"]["tensors"] == sum(m["tensors"] for m in me["memory"]["cores"].values())
        assert devices[0]["bdf"] == "0000:00:1e.0"
        status, hist = exporter.json("/api/v1/history?metric=utilization&neuroncore=0")
        points = hist["series"][0]["points"]
        assert status == 200 and len(points) >= 3 and max(v for _, v in points) > 0
        assert all(0 <= v <= 1 for _, v in points)
        assert [t for t, _ in points] == sorted(t for t, _ in points)
        status, later = exporter.json(f"/api/v1/history?metric=utilization&neuroncore=0&since={points[-1][0]}")
        assert later["series"][0]["points"][0] == points[-1]
        listed = json.loads(run_tool(["neuron-ls", "-a", "-j"], daemon.address).stdout)
        assert any(p["command"].startswith("neuron-exporter") for d in listed for p in d["neuron_processes"])

        # the process exits: node counters keep everything it did, its gauges and series go
        totals = counters(samples)
        proc.stdin.close()
        assert proc.wait(timeout=15) == 0
        assert wait_until(lambda: value(exporter.samples(), "neuron_runtime_processes") == 0, timeout=5)
        after = exporter.samples()
        for key, v in totals.items():
            if key[0] == "neuron_host_cpu_seconds_total":  # the real host keeps running
                assert after[key] >= v
            elif not key[0].startswith("neuron_process_"):
                assert after[key] == pytest.approx(v), key
        assert not series(after, "neuron_process_hbm_used_bytes")
        assert value(after, "neurondevice_hbm_used_bytes", neuron_device="0", category="tensors") == 0
        assert value(after, "neuroncore_in_use", neuron_device="0", neuroncore="0") == 0
    finally:
        reap(proc)

    # SIGTERM: clean exit 0, and the daemon no longer lists the exporter
    assert exporter.stop() == 0
    assert exporter.proc.stderr is not None and "Traceback" not in exporter.proc.stderr.read()
    assert not any(p["command"].startswith("neuron-exporter") for p in daemon.processes())


def _compat_labels(samples: dict) -> dict[str, str]:
    [labels] = series(samples, "instance_info")
    return dict(labels)


def test_readiness_outages_and_scrapes_that_never_block(daemon_factory, short_tmp: Path, exporters) -> None:
    address = str(short_tmp / "later.sock")
    exporter = start_exporter(address, "--interval", "0.2")
    exporters.append(exporter)

    # no daemon yet: alive, not ready, metrics say so
    assert exporter.get("/healthz")[0] == 200
    status, body = exporter.json("/readyz")
    assert status == 503 and "no Neuron emulator daemon" in body["error"]
    samples = exporter.samples()
    assert value(samples, "neuron_exporter_source_up", source="daemon") == 0
    assert not series(samples, "neuron_instance_info")
    assert exporter.json("/api/v1/neuroncores")[0] == 503

    # the daemon appears: ready, registered as a tool
    daemon = daemon_factory(address=address)
    assert wait_until(lambda: exporter.get("/readyz")[0] == 200, timeout=5)
    assert wait_until(lambda: any(p["kind"] == "tool" for p in daemon.processes()), timeout=5)
    assert value(exporter.samples(), "neurondevice_hbm_total_bytes", neuron_device="0") == 32 * 2**30

    # the daemon hangs: every scrape still answers at once from the last values
    daemon.proc.send_signal(signal.SIGSTOP)
    try:
        up, slowest = [], 0.0
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            started = time.monotonic()
            samples = exporter.samples()
            ready = exporter.get("/readyz")[0]
            slowest = max(slowest, time.monotonic() - started)
            up.append((value(samples, "neuron_exporter_source_up", source="daemon"), ready))
            assert value(samples, "neurondevice_hbm_total_bytes", neuron_device="0") == 32 * 2**30
            time.sleep(0.05)
        assert slowest < 0.5, slowest
        assert up[-1] == (0, 503)
    finally:
        daemon.proc.send_signal(signal.SIGCONT)
    assert wait_until(lambda: exporter.get("/readyz")[0] == 200, timeout=5)

    # the daemon restarts: the exporter keeps retrying, then registers again
    daemon.stop()
    assert wait_until(lambda: exporter.get("/readyz")[0] == 503, timeout=5)
    again = daemon_factory(address=address)
    assert wait_until(lambda: exporter.get("/readyz")[0] == 200, timeout=5)
    assert wait_until(lambda: [p["kind"] for p in again.processes()] == ["tool"], timeout=5)
    assert exporter.stop(signal.SIGINT) == 0


def test_rest_parameters_errors_and_openapi(daemon, exporters) -> None:
    exporter = start_exporter(daemon.address, "--interval", "0.2")
    exporters.append(exporter)
    assert wait_until(lambda: exporter.get("/readyz")[0] == 200, timeout=10)
    time.sleep(1.3)  # at least one history row (one per second)

    status, instance = exporter.json("/api/v1/instance")
    assert status == 200 and instance["instance"]["instance_type"] == "trn1.2xlarge"
    assert instance["source_up"] is True and instance["collection_interval_seconds"] == 0.2
    status, metrics = exporter.json("/api/v1/history/metrics")
    assert {m["name"] for m in metrics} == set(HISTORY_METRICS)
    status, hist = exporter.json("/api/v1/history?metric=host_memory_used_bytes")
    assert status == 200 and hist["series"][0]["neuroncore"] is None and hist["series"][0]["points"]
    status, hist = exporter.json("/api/v1/history?metric=hbm_used_bytes")
    assert [s["neuroncore"] for s in hist["series"]] == [0, 1]

    future = time.time() + 3600
    bad = {
        "/api/v1/history?metric=nope": "unknown metric 'nope'",
        "/api/v1/history": "metric",
        "/api/v1/history?metric=utilization&neuroncore=2": "out of range",
        "/api/v1/history?metric=utilization&neuroncore=-1": "out of range",
        "/api/v1/history?metric=utilization&neuroncore=abc": "neuroncore",
        "/api/v1/history?metric=utilization&since=yesterday": "since",
        "/api/v1/history?metric=utilization&since=nan": "since",
        f"/api/v1/history?metric=utilization&since={future}": "in the future",
        "/api/v1/history?metric=host_memory_used_bytes&neuroncore=0": "not per NeuronCore",
    }
    for path, needle in bad.items():
        status, body = exporter.json(path)
        assert status == 400 and needle in body["error"], (path, status, body)
        assert set(body) == {"error"}
    status, body = exporter.json("/api/v1/nothing")
    assert status == 404 and body == {"error": "not found"}

    status, spec = exporter.json("/openapi.json")
    paths = spec["paths"]
    for path in ("instance", "devices", "neuroncores", "processes", "report", "history"):
        assert f"/api/v1/{path}" in paths
    for model in ("NeuronCoreResponse", "HistoryResponse", "DeviceResponse", "ProcessResponse", "ErrorBody"):
        assert model in spec["components"]["schemas"]
    assert {"/metrics", "/healthz", "/readyz"} <= set(paths)
    assert exporter.stop() == 0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--port", "http"], "invalid port 'http'"),
        (["--port", "70000"], "out of range"),
        (["--interval", "0"], "interval 0 is out of range"),
        (["--interval", "fast"], "invalid interval"),
        (["--bind", "my-host"], "invalid address"),
        (["--frobnicate"], "unrecognized arguments"),
    ],
)
def test_bad_flags_one_line_and_nonzero_exit(args: list[str], needle: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "neurontools.exporter.cli", *args],
        env=tool_env("/nonexistent.sock"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1 and one_clear_line(done.stderr) and needle in done.stderr, done.stderr


def test_port_in_use_is_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "neurontools.exporter.cli", "--port", str(port)],
            env=tool_env("/nonexistent.sock"),
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert done.returncode == 1 and one_clear_line(done.stderr) and "cannot listen" in done.stderr


# -- collection semantics on recorded snapshots ---------------------------------------------------


def _fixture(name: str) -> Snapshot:
    return parsed(recorded(name))


def test_node_totals_keep_what_exited_processes_did() -> None:
    prev, cur = _fixture("trn1_2xlarge_train_prev"), _fixture("trn1_2xlarge_train_cur")
    acc = Accumulator()
    first = acc.add(None, prev)
    second = acc.add(prev, cur)
    [proc] = cur.runtime_processes
    for core, counters_of in proc.cores.items():
        assert second.flops[core] == counters_of.flops
        assert second.busy[core] == pytest.approx(counters_of.busy)
    assert second.executions["completed"] == proc.executions.completed
    # every latency listed is observed once, however often it is listed again
    assert second.latency_count == len({lat.end for lat in proc.latencies})
    assert acc.add(cur, cur).latency_count == second.latency_count
    # the process exits: nothing goes backwards
    gone = replace(cur, time=cur.time + 1, monotonic=cur.monotonic + 1, processes=())
    third = acc.add(cur, gone)
    assert third.flops == second.flops and third.executions == second.executions
    assert third.latency_count == second.latency_count >= first.latency_count
    # a process that (re)appears after a baseline without it counts from zero
    assert acc.add(gone, prev).flops[0] == second.flops[0] + prev.process(proc.pid).cores[0].flops


def test_history_ring_is_bounded_and_ordered() -> None:
    ring = History(capacity=4)
    for t in range(10):
        ring.append(float(t), {("utilization", 0): t / 10} if t != 8 else {})
    assert [(p.time, p.value) for p in ring.points(("utilization", 0))] == [(6.0, 0.6), (7.0, 0.7), (9.0, 0.9)]
    assert [p.time for p in ring.points(("utilization", 0), since=7.0)] == [7.0, 9.0]
    assert ring.points(("nope", 0)) == [] and len(ring) == 4
    assert ring.memory_bytes() == 8 * 4 * 2
    prev, cur = _fixture("trn1_2xlarge_train_prev"), _fixture("trn1_2xlarge_train_cur")
    assert {name for name, _ in history_values(prev, cur)} == set(HISTORY_METRICS)
    assert all(math.isfinite(v) for v in history_values(prev, cur).values())


# -- rendering at scrape time (many exporters in one process: neuron-emulator cluster) -------------


class _Snapshots:
    """A daemon that answers two recorded snapshots in turn (and no inventory)."""

    def __init__(self) -> None:
        first = recorded("trn1_2xlarge_train_prev")
        self.answers = [first, later(first, 1.0, busy={0: 0.5})]

    def get(self, path: str) -> Any:
        from neurontools.sources.daemon_client import DaemonError

        if path.startswith("/snapshot"):
            return self.answers.pop(0)
        raise DaemonError(404, {"error": "not found"})


def test_exposition_on_scrape_renders_once_per_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    from neurontools.exporter import app as exporter_app
    from neurontools.exporter.collector import Collector, CompatFeed

    collector = Collector(_Snapshots(), 1.0, compat=CompatFeed.load())
    exposition = exporter_app.Exposition(collector, per_process=False, on_scrape=True)
    assert collector.on_collected is None  # nothing rendered on the collection thread
    renders: list[object] = []
    real = exporter_app.generate_latest
    monkeypatch.setattr(exporter_app, "generate_latest", lambda registry: renders.append(registry) or real(registry))

    def busy(text: bytes) -> float:
        for family in text_string_to_metric_families(text.decode()):
            for s in family.samples:
                if s.name == "neuroncore_busy_seconds_total" and s.labels["neuroncore"] == "0":
                    return float(s.value)
        raise AssertionError("no neuroncore_busy_seconds_total for core 0")

    collector.collect_once()
    first = exposition.scrape()
    assert busy(exposition.scrape()) == busy(first)
    assert renders.count(exposition.neuron) == 1  # two scrapes, one collection: rendered once
    collector.collect_once()
    assert busy(exposition.scrape()) == pytest.approx(busy(first) + 0.5)
    assert renders.count(exposition.neuron) == 2
