"""The fleet view end to end: a real Prometheus, configured as dashboards/prometheus-cluster.yml
configures it, scrapes the four exporters of a four-node emulated cluster (its file_sd target
file) while a real training job runs over all four nodes (docs/multinode.md). Every query of the
fleet dashboard returns data, and each fault makes its alert fire and then clear:

- a slow node (``fault slow --node 1``)           -> NeuronStragglerNode for node 1
- NaN results (``fault nan --node 2``)             -> NeuronExecutionErrors for node 2 (alerts.yml)
- the job's launcher stopped (SIGSTOP)             -> NeuronJobStalled for the job
- an uncorrectable ECC error (``fault ecc``)       -> NeuronHardwareErrors for node 1 (the job dies)
- cut EFA bandwidth (``fault efa --node 3``)       -> NeuronEFADegraded for node 3
- a lost node (``fault node-down --node 2``)       -> NeuronNodeExporterDown for node 2, until node-up

Faults that cannot disturb each other's alerts run together, on different nodes: the slow node
and the NaN results (NaN changes no timing); the EFA cut and the lost node while the hardware
error ages out of its window (the job is dead by then; both alerts read node-level series).

Rules run at test speed: every ``for:`` is 2 s and every 5 or 10 minute range window is 10 s
(instead of 5 or 10 minutes: ~24 of the job's 0.42 s steps, ten 1 s scrapes); the expressions
are otherwise the shipped ones.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulator.hardware import get_instance_type
from emulator.parallel.launch import load_models
from emulator.parallel.runner import JobRequest, plan_request
from tests.support import BIN, PROMETHEUS, free_port, prometheus_argv, wait_until
from tests.test_cluster import Cluster, running_cluster
from tests.test_prometheus_e2e import concrete, dashboard_queries

ROOT = Path(__file__).parent.parent
DASHBOARDS = ROOT / "dashboards"
MODEL = "vit-base"
NODES = 4  # trn1.2xlarge: 8 ranks, DP8
# the fleet families (dashboards/README.md §Fleet metrics): a multi-node job's, checked here
FLEET_FAMILIES = ("neuron_job_", "neuron_collective_wait_seconds_total")
WINDOW = "10s"  # every rule's range window (see the module docstring)

pytestmark = [
    pytest.mark.skipif(PROMETHEUS is None, reason="Debian package 'prometheus' not installed"),
    pytest.mark.timeout(600),
]


def fleet_rules(source: Path, dest: Path) -> Path:
    """The rules with ``for:`` at 2 s and range windows of 10 s (expressions otherwise unchanged)."""
    text = re.sub(r"(\bfor:\s*)\S+", r"\g<1>2s", source.read_text())
    dest.write_text(re.sub(r"\[(5|10)m\]", f"[{WINDOW}]", text))
    return dest


class Fleet:
    def __init__(self, cluster: Cluster, tmp: Path) -> None:
        self.cluster = cluster
        self.tmp = tmp
        self.port = free_port()
        self.cache = tmp / "compile-cache"
        plan = plan_request(JobRequest(MODEL, nodes=NODES), get_instance_type("trn1.2xlarge"))
        load_models(plan, {"NEURON_COMPILE_CACHE_URL": str(self.cache)})  # no simulated compile wait
        config = (DASHBOARDS / "prometheus-cluster.yml").read_text()
        rules = [fleet_rules(DASHBOARDS / name, tmp / name) for name in ("alerts.yml", "fleet-alerts.yml")]
        config = config.replace("- alerts.yml", f"- {rules[0]}").replace("- fleet-alerts.yml", f"- {rules[1]}")
        config = re.sub(r"(scrape_interval|evaluation_interval): 15s", r"\1: 1s", config)
        config = re.sub(
            r"- files:\n(?:\s+#.*\n|\s+- .*\n)+", f"- files: ['{cluster.status['file_sd']}']\n", config, count=1
        ).replace("refresh_interval: 30s", "refresh_interval: 1s")
        (tmp / "prometheus.yml").write_text(config)
        self.prom = subprocess.Popen(
            prometheus_argv(tmp / "prometheus.yml", tmp / "tsdb", self.port),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.job: subprocess.Popen[str] | None = None

    def start_job(self) -> None:
        self.job = subprocess.Popen(
            [str(BIN / "neuron-emulator"), "run", MODEL, "--nodes", str(NODES), "--steps", "1000000"],
            env=self.cluster.env(0, NEURON_COMPILE_CACHE_URL=str(self.cache)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def api(self, path: str) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/{path}", timeout=10) as resp:
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        try:
            return self.api("query?" + urllib.parse.urlencode({"query": expr}))["result"]
        except OSError:
            return []

    def firing(self, alert: str) -> list[dict[str, str]]:
        try:
            alerts = self.api("alerts")["alerts"]
        except OSError:
            return []
        return [a["labels"] for a in alerts if a["labels"]["alertname"] == alert and a["state"] == "firing"]

    def fault(self, *argv: str) -> None:
        res = subprocess.run(
            [str(BIN / "neuron-emulator"), "fault", *argv],
            env=self.cluster.env(0),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert res.returncode == 0, res.stderr

    def stop(self) -> None:
        for proc in (self.job, self.prom):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGCONT)
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    tmp = Path(tempfile.mkdtemp(prefix="nt-fleet-", dir="/tmp"))
    cluster_flags = ("--nodes", str(NODES), "--instance-type", "trn1.2xlarge", "--exporter-interval", "0.5")
    with running_cluster(*cluster_flags) as cluster:
        f = Fleet(cluster, tmp)
        try:
            f.start_job()
            # every node scraped, and the job's steps reached Prometheus from every one
            assert wait_until(
                lambda: len(f.query(f'rate(neuron_job_steps_total{{job="neuron-cluster"}}[{WINDOW}]) > 0')) == NODES,
                timeout=120,
                interval=1,
            ), "no job steps reached prometheus"
            yield f
        finally:
            f.stop()
            shutil.rmtree(tmp, ignore_errors=True)


def test_every_fleet_dashboard_query_returns_data(fleet: Fleet) -> None:
    queries = dashboard_queries(DASHBOARDS / "trn1-fleet.json")  # every one, the job and node rows too
    assert sum(1 for q in queries if any(f in q for f in FLEET_FAMILIES)) >= 5
    # the wait series: the job's lockstep makes one node wait for the other at every step
    assert wait_until(lambda: bool(fleet.query(f"rate(neuron_collective_wait_seconds_total[{WINDOW}]) > 0")), 30)

    def empty() -> list[str]:
        return [q for q in queries if not fleet.query(concrete(q))]

    assert wait_until(lambda: not empty(), timeout=30, interval=1), f"fleet dashboard queries without data: {empty()}"
    # and nothing fires on a healthy job
    for alert in ("NeuronStragglerNode", "NeuronJobStalled", "NeuronEFADegraded", "NeuronNodeExporterDown"):
        assert fleet.firing(alert) == [], alert


def test_faults_fire_their_fleet_alerts_and_clearing_them_resolves_them(fleet: Fleet) -> None:
    def fires_for_node(alert: str, node: str) -> bool:
        return any(labels.get("node") == node for labels in fleet.firing(alert))

    # a straggler: node 1's cores 3x slower -> every step waits for it; and node 2's executions
    # complete with NaN/Inf (no timing changes: the straggler stays node 1 alone)
    fleet.fault("slow", "--factor", "3", "--node", "1")
    fleet.fault("nan", "--node", "2")
    assert wait_until(lambda: fires_for_node("NeuronStragglerNode", "1"), timeout=60, interval=1)
    assert wait_until(lambda: fires_for_node("NeuronExecutionErrors", "2"), timeout=60, interval=1)
    assert {labels.get("node") for labels in fleet.firing("NeuronStragglerNode")} == {"1"}  # only the slow one
    assert {labels.get("node") for labels in fleet.firing("NeuronExecutionErrors")} == {"2"}
    assert all(a.get("outcome") == "completed_with_num_err" for a in fleet.firing("NeuronExecutionErrors"))
    fleet.fault("clear", "--node", "1")
    fleet.fault("clear", "--node", "2")
    assert wait_until(lambda: not fleet.firing("NeuronStragglerNode"), timeout=90, interval=1)
    assert wait_until(lambda: not fleet.firing("NeuronExecutionErrors"), timeout=90, interval=1)

    # the job hangs: its launcher stopped, every rank waits at the step's end holding its core
    assert fleet.job is not None
    os.killpg(fleet.job.pid, signal.SIGSTOP)
    try:
        assert wait_until(lambda: bool(fleet.firing("NeuronJobStalled")), timeout=90, interval=1)
        [stalled] = fleet.firing("NeuronJobStalled")
        assert stalled["job_id"].startswith(f"{MODEL}-")
    finally:
        os.killpg(fleet.job.pid, signal.SIGCONT)
    assert wait_until(lambda: not fleet.firing("NeuronJobStalled"), timeout=90, interval=1)

    # an uncorrectable ECC error on node 1: the execution fails, the job dies on every node
    fleet.fault("ecc", "--device", "0", "--node", "1")
    assert wait_until(lambda: fleet.job is not None and fleet.job.poll() is not None, timeout=60)
    assert fleet.job.returncode == 1
    assert "NRT_EXEC_HW_ERR_HBM_UE" in (fleet.job.stderr.read() if fleet.job.stderr else "")
    assert wait_until(lambda: fires_for_node("NeuronHardwareErrors", "1"), timeout=60, interval=1)

    # while that ages out of its window: EFA at half bandwidth on node 3, and node 2 lost (its
    # exporter's target stays, down); each clears when the fault does
    fleet.fault("efa", "--factor", "0.5", "--node", "3")
    fleet.fault("node-down", "--node", "2")
    assert wait_until(lambda: fires_for_node("NeuronEFADegraded", "3"), timeout=60, interval=1)
    assert wait_until(lambda: fires_for_node("NeuronNodeExporterDown", "2"), timeout=60, interval=1)
    assert {labels.get("node") for labels in fleet.firing("NeuronNodeExporterDown")} == {"2"}
    fleet.fault("clear", "--node", "3")
    up = subprocess.run(
        [str(BIN / "neuron-emulator"), "cluster", "node-up", "--node", "2"],
        env=fleet.cluster.env(0),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert up.returncode == 0, up.stderr
    assert wait_until(lambda: not fleet.firing("NeuronEFADegraded"), timeout=60, interval=1)
    assert wait_until(lambda: not fleet.firing("NeuronNodeExporterDown"), timeout=60, interval=1)
    assert wait_until(lambda: not fleet.firing("NeuronHardwareErrors"), timeout=90, interval=1)
