"""A real Prometheus scrapes a real neuron-exporter and a real `neuron-monitor | neuron-monitor-prometheus`
pipeline, fed by a daemon with real training processes. Every PromQL expression of both dashboards
must return data, and every alert rule must fire under the condition the test creates.

The stack (trn1.32xlarge):
- core 0: `neuron-emulator run mlp` training continuously;
- cores 2 and 3 (device 1): idle processes each holding 14.6 GiB of HBM -> device 1 above 90 %,
  and NeuronCores held while idle;
- core 4: a training loop with a learning rate that makes it diverge -> numerical errors;
- device 5: uncorrected ECC events injected while Prometheus watches;
- finally the monitor pipeline is stopped -> its scrape target is down.
Alert rules are loaded unchanged except their `for:` durations, shortened so the test takes seconds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.monitor_configs import monitor_config
from tests.support import BIN, HELPERS, PROMETHEUS, free_port, prometheus_argv, start_daemon, tool_env, wait_until

ROOT = Path(__file__).parent.parent
DASHBOARDS = ROOT / "dashboards"

pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="Debian package 'prometheus' not installed")

MONITOR_CONFIG = monitor_config("1s")


class Stack:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen] = []
        self.prom_port = free_port()
        self.exporter_port = free_port()
        self.compat_port = free_port()
        self.daemon = start_daemon(tmp, "trn1.32xlarge")
        self.env = tool_env(self.daemon.address, {"NEURON_COMPILE_CACHE_URL": str(tmp / "cache")})

    def spawn(self, argv: list[str], extra: dict[str, str] | None = None, **kw: object) -> subprocess.Popen:
        proc = subprocess.Popen(
            argv,
            env={**self.env, **(extra or {})},
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            **kw,  # type: ignore[arg-type]
        )
        self.procs.append(proc)
        return proc

    def query(self, expr: str) -> list[dict]:
        url = f"http://127.0.0.1:{self.prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def alerts(self) -> dict[str, str]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.prom_port}/api/v1/alerts", timeout=10) as resp:
            body = json.load(resp)
        states: dict[str, str] = {}
        for alert in body["data"]["alerts"]:
            name = alert["labels"]["alertname"]
            if states.get(name) != "firing":
                states[name] = alert["state"]
        return states

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.daemon.stop()


def fast_rules(source: Path, dest: Path) -> Path:
    """The alert rules with their `for:` durations shortened to 2 s (expressions unchanged)."""
    dest.write_text(re.sub(r"(\bfor:\s*)\S+", r"\g<1>2s", source.read_text()))
    return dest


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="nt-prom-", dir="/tmp"))
    s = Stack(tmp)
    try:
        py = sys.executable
        s.spawn([str(BIN / "neuron-emulator"), "run", "mlp", "--steps", "1000000", "--cores", "0"])
        for core in (2, 3):
            s.spawn([py, str(HELPERS / "hold_hbm.py"), "14.6"], {"NEURON_RT_VISIBLE_CORES": str(core)})
        train = tmp / "train_loop.py"
        train.write_text((HELPERS / "train_loop.py").read_text())
        s.spawn([py, str(train), "--steps", "1000000", "--lr", "1e6"], {"NEURON_RT_VISIBLE_CORES": "4"})
        s.spawn(
            [str(BIN / "neuron-exporter"), "--bind", "127.0.0.1", "--port", str(s.exporter_port), "--interval", "1"]
        )
        monitor_conf = tmp / "monitor.json"
        monitor_conf.write_text(json.dumps(MONITOR_CONFIG))
        s.compat = s.spawn(
            [
                "sh",
                "-c",
                f"exec '{BIN / 'neuron-monitor'}' -c '{monitor_conf}' | exec '{BIN / 'neuron-monitor-prometheus'}'"
                f" --bind 127.0.0.1 -p {s.compat_port}",
            ]
        )
        rules = fast_rules(DASHBOARDS / "alerts.yml", tmp / "alerts.yml")
        config = tmp / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files: ['{rules}']\n"
            "scrape_configs:\n"
            f"  - job_name: neuron\n    static_configs: [{{targets: ['127.0.0.1:{s.compat_port}']}}]\n"
            f"  - job_name: neuron-exporter\n    static_configs: [{{targets: ['127.0.0.1:{s.exporter_port}']}}]\n"
        )
        s.spawn(prometheus_argv(config, tmp / "tsdb", s.prom_port))
        assert wait_until(lambda: _ready(s), timeout=60, interval=0.5), "prometheus not ready"
        # enough samples for rate()/increase() over [1m] windows and for histogram quantiles
        assert wait_until(
            lambda: (
                bool(s.query('sum(rate(execution_status_total{status_type!="completed"}[1m])) > 0'))
                and bool(s.query("sum(rate(neuron_execution_latency_seconds_count[1m])) > 0"))
            ),
            timeout=90,
            interval=1,
        ), "no execution data reached prometheus"
        time.sleep(3)
        yield s
    finally:
        s.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _ready(s: Stack) -> bool:
    try:
        return len(s.query("up == 1")) == 2
    except OSError:
        return False


def dashboard_queries(path: Path) -> list[str]:
    def walk(node: object) -> Iterator[str]:
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str) and node["expr"].strip():
                yield node["expr"]
            for value in node.values():
                yield from walk(value)
        elif isinstance(node, list):
            for value in node:
                yield from walk(value)

    return list(dict.fromkeys(walk(json.loads(path.read_text()))))


def concrete(expr: str) -> str:
    """Grafana's variables replaced by values Prometheus can run."""
    expr = expr.replace("$__rate_interval", "1m").replace("$__interval", "5s").replace("$__range", "5m")
    return re.sub(r"\$\{?(\w+)(?::\w+)?\}?", ".*", expr)


@pytest.mark.parametrize("dashboard", ["neuron-monitor.json", "trn1-fleet.json"])
def test_every_dashboard_query_returns_data(stack: Stack, dashboard: str) -> None:
    queries = dashboard_queries(DASHBOARDS / dashboard)
    assert queries
    # a multi-node job's families: tests/test_fleet_e2e.py runs one and checks those queries
    queries = [q for q in queries if not any(f in q for f in ("neuron_job_", "neuron_collective_wait_seconds_total"))]
    empty = [q for q in queries if not stack.query(concrete(q))]
    assert empty == [], f"queries without data in {dashboard}: {empty}"


def test_every_alert_fires_for_its_condition(stack: Stack) -> None:
    names = re.findall(r"^\s*-\s*alert:\s*(\S+)", (DASHBOARDS / "alerts.yml").read_text(), re.M)
    assert names
    down = [n for n in names if "Down" in n]
    live = [n for n in names if n not in down]
    # uncorrected ECC events while Prometheus watches (the rule fires on an increase)
    subprocess.run(
        [str(BIN / "neuron-emulator"), "fault", "ecc", "--device", "5", "--count", "2"],
        env=stack.env,
        check=True,
        capture_output=True,
    )
    assert wait_until(lambda: all(stack.alerts().get(n) == "firing" for n in live), timeout=30, interval=1), (
        f"not firing: {[n for n in live if stack.alerts().get(n) != 'firing']}"
    )
    os.killpg(stack.compat.pid, signal.SIGTERM)  # the neuron-monitor pipeline goes away
    stack.compat.wait(timeout=15)
    assert wait_until(lambda: all(stack.alerts().get(n) == "firing" for n in down), timeout=30, interval=1), (
        f"not firing: {[n for n in down if stack.alerts().get(n) != 'firing']}"
    )
