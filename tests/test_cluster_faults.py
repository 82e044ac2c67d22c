"""Faults of a cluster's nodes (docs/faults.md, docs/cluster.md): ``fault ... --node N`` lands on node
N only; ``fault node-down --node N`` kills the node's runtime processes and stops its daemon and
exporter while the other nodes keep running; ``cluster node-up`` brings it back; bad ``--node``
values are one line.

Each cluster is a real ``neuron-emulator cluster up --detach`` in a runtime directory of its own
(``tests/test_cluster.py: running_cluster``), the processes real training processes.
"""

from __future__ import annotations

import contextlib
import json
import signal
import stat
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neurontools.sources.address import parse_address
from neurontools.sources.daemon_client import DaemonClient, DaemonUnavailable
from tests.support import (
    HELPERS,
    PROMETHEUS,
    free_port,
    one_clear_line,
    prometheus_argv,
    run_tool,
    tool_env,
    wait_or_kill,
    wait_until,
)
from tests.test_cluster import Cluster, cluster_cmd, get, host_gone, running_cluster

NO_FAULTS = {"efa_bandwidth_factor": 1.0, "cores": []}
ROOT = Path(__file__).parents[1]


def fault(cluster: Cluster | Path, *argv: str, address: str | None = None) -> subprocess.CompletedProcess[str]:
    runtime = cluster.runtime if isinstance(cluster, Cluster) else cluster
    return run_tool(["neuron-emulator", "fault", *argv], address, XDG_RUNTIME_DIR=str(runtime))


def client(node: dict[str, Any]) -> DaemonClient:
    return DaemonClient(parse_address(node["address"]), timeout=5)


def status(cluster: Cluster) -> dict[str, Any]:
    out = cluster_cmd(cluster.runtime, "status", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


def hold(cluster: Cluster, node: int) -> subprocess.Popen[str]:
    """A training process holding HBM on ``node`` (tests/helpers/hold_hbm.py) until its stdin closes."""
    return subprocess.Popen(
        [sys.executable, str(HELPERS / "hold_hbm.py"), "0.5"],
        env=cluster.env(node),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def holding(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("holding "), line + (proc.stderr.read() if proc.poll() is not None and proc.stderr else "")


def release(proc: subprocess.Popen[str]) -> int:
    """Let a holder exit (close its stdin), kill it if it does not; close its pipes."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.close()
    code = wait_or_kill(proc, 15)
    proc.stdout.close()
    proc.stderr.close()
    return code


def refused(url: str) -> bool:
    try:
        get(url)
    except urllib.error.URLError as exc:
        return isinstance(exc.reason, ConnectionRefusedError)
    return False


@pytest.fixture(scope="module")
def cluster2() -> Iterator[Cluster]:
    """Two trn1.2xlarge nodes no test takes down."""
    with running_cluster("--nodes", "2", "--instance-type", "trn1.2xlarge") as cluster:
        yield cluster


# -- --node addresses one node --------------------------------------------------------------------


def test_faults_with_node_land_on_that_node_only(cluster2: Cluster) -> None:
    node0, node1 = cluster2.nodes
    out = fault(cluster2, "slow", "--factor", "2", "--node", "0")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "neuron-emulator: nc0-nc1: executions take 2x their device time\n"
    slow = [{"core": c, "slow_factor": 2.0, "nan": False, "hardware_error": None} for c in (0, 1)]
    assert client(node0).get("/faults") == {"efa_bandwidth_factor": 1.0, "cores": slow}
    assert client(node1).get("/faults") == NO_FAULTS

    assert fault(cluster2, "nan", "--core", "1", "--node", "1").returncode == 0
    assert client(node1).get("/faults")["cores"] == [
        {"core": 1, "slow_factor": 1.0, "nan": True, "hardware_error": None}
    ]
    assert client(node0).get("/faults")["cores"] == slow

    clear = fault(cluster2, "clear", "--node", "0")
    assert clear.returncode == 0, clear.stderr
    assert client(node0).get("/faults") == NO_FAULTS
    assert client(node1).get("/faults")["cores"][0]["nan"]  # node 1's stays
    assert fault(cluster2, "clear", "--node", "1").returncode == 0
    assert client(node1).get("/faults") == NO_FAULTS


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["fault", "slow", "--factor", "2", "--node", "2"], 1, "--node 2: the cluster has 2 node(s), 0-1"),
        (["fault", "node-down", "--node", "7"], 1, "--node 7: the cluster has 2 node(s), 0-1"),
        (["fault", "clear", "--node", "-1"], 2, "node -1 is out of range (expected 0 to 63)"),
        (["fault", "clear", "--node", "one"], 2, "invalid node index 'one'"),
        (["fault", "clear", "--node", "0", "--socket", "/tmp/x.sock"], 2, "not allowed with argument --node"),
        (["fault", "clear", "--node", "0", "--port", "9"], 2, "not allowed with argument --node"),
        (["fault", "node-down", "--node", "0", "--core", "1"], 2, "node-down applies to the whole node"),
        (["fault", "node-down", "--node", "0", "--factor", "2"], 2, "--factor applies to slow and efa"),
        (["cluster", "node-up", "--node", "0"], 1, "node 0 is up"),
        (["cluster", "node-up", "--node", "2"], 1, "--node 2: the cluster has 2 node(s), 0-1"),
        (["cluster", "node-up"], 2, "the following arguments are required: --node"),
    ],
)
def test_bad_node_values_are_one_line(cluster2: Cluster, argv: list[str], code: int, message: str) -> None:
    out = run_tool(["neuron-emulator", *argv], None, XDG_RUNTIME_DIR=str(cluster2.runtime))
    assert out.returncode == code, out.stderr
    assert one_clear_line(out.stderr) and message in out.stderr, out.stderr
    assert out.stdout == ""
    assert all(n["daemon_up"] and not n["down"] for n in status(cluster2)["nodes"])  # nothing happened


def test_node_without_a_cluster_is_one_line(short_tmp: Path) -> None:
    for argv in (["fault", "slow", "--factor", "2", "--node", "0"], ["fault", "node-down", "--node", "0"]):
        out = run_tool(["neuron-emulator", *argv], None, XDG_RUNTIME_DIR=str(short_tmp))
        assert out.returncode == 1, out.stderr
        assert one_clear_line(out.stderr) and "no cluster running" in out.stderr, out.stderr
    up = run_tool(["neuron-emulator", "cluster", "node-up", "--node", "0"], None, XDG_RUNTIME_DIR=str(short_tmp))
    assert up.returncode == 1 and one_clear_line(up.stderr) and "no cluster running" in up.stderr, up.stderr


def test_node_down_on_a_single_daemon_is_refused(daemon, short_tmp: Path) -> None:
    out = run_tool(["neuron-emulator", "fault", "node-down"], daemon.address, XDG_RUNTIME_DIR=str(short_tmp))
    assert out.returncode == 1
    assert one_clear_line(out.stderr) and "is no node of a running cluster" in out.stderr, out.stderr
    assert "'neuron-emulator down'" in out.stderr
    assert daemon.answers()


def test_the_hosts_control_socket_is_private_and_lists_the_nodes(cluster2: Cluster) -> None:
    control = cluster2.runtime / "neuron-emulator-cluster" / "control.sock"
    assert stat.S_ISSOCK(control.lstat().st_mode) and stat.S_IMODE(control.lstat().st_mode) == 0o600
    assert stat.S_IMODE(control.parent.stat().st_mode) == 0o700
    nodes = DaemonClient(parse_address(str(control)), timeout=5).get("/nodes")
    assert nodes == [{"index": 0, "down": False}, {"index": 1, "down": False}]


def test_down_at_a_node_address_is_refused(cluster2: Cluster) -> None:
    node = cluster2.nodes[1]
    out = run_tool(["neuron-emulator", "down"], node["address"], XDG_RUNTIME_DIR=str(cluster2.runtime))
    assert out.returncode == 1
    assert one_clear_line(out.stderr), out.stderr
    assert "is node 1 of a cluster of 2 nodes" in out.stderr and "'neuron-emulator cluster down'" in out.stderr
    assert not host_gone(cluster2.status["pid"])
    assert all(n["daemon_up"] for n in status(cluster2)["nodes"])


# -- node loss ------------------------------------------------------------------------------------


def test_node_down_kills_the_nodes_processes_and_stops_its_daemon_and_exporter() -> None:
    with running_cluster("--nodes", "2", "--instance-type", "trn1.2xlarge") as cluster:
        node0, node1 = cluster.nodes
        # a counter of node 0 before: it stays through everything below
        ecc = fault(cluster, "ecc", "--device", "0", "--type", "mem_ecc_corrected", "--node", "0")
        assert ecc.returncode == 0, ecc.stderr
        on0, on1 = hold(cluster, 0), hold(cluster, 1)
        try:
            holding(on0)
            holding(on1)
            assert [p["pid"] for p in client(node1).get("/processes") if p["kind"] == "runtime"] == [on1.pid]

            down = fault(cluster, "node-down", "--node", "1")
            assert down.returncode == 0, down.stderr
            assert f"node 1 ({node1['instance_id']}) is down" in down.stdout
            assert f"runtime processes killed: {on1.pid} (" in down.stdout
            assert "cluster node-up --node 1" in down.stdout

            # node 1: its process died as with the node, nothing answers at its addresses
            assert on1.wait(timeout=10) == -9
            assert not Path(node1["address"]).exists()
            with pytest.raises(DaemonUnavailable):
                client(node1).get("/status")
            assert refused(node1["exporter_url"])
            run = run_tool(["neuron-ls"], node1["address"], XDG_RUNTIME_DIR=str(cluster.runtime))
            assert run.returncode != 0 and "no Neuron emulator daemon" in run.stderr

            # node 0 and its process run on; the host (also node 0's exporter, a tool) was not killed
            assert on0.poll() is None
            assert [p["pid"] for p in client(node0).get("/processes") if p["kind"] == "runtime"] == [on0.pid]
            assert get(node0["exporter_url"])[0] == 200
            assert not host_gone(cluster.status["pid"])

            # status says node 1 is down; its Prometheus target stays (up == 0: "exporter down" can fire)
            now = {n["index"]: n for n in status(cluster)["nodes"]}
            assert now[1]["down"] and not now[1]["daemon_up"] and not now[1]["exporter_ready"]
            assert not now[0]["down"] and now[0]["daemon_up"] and now[0]["exporter_ready"]
            assert now[0]["processes"] == 1
            table = cluster_cmd(cluster.runtime, "status").stdout
            assert "(node down)" in next(line for line in table.splitlines() if node1["instance_id"] in line)
            targets = json.loads(Path(cluster.status["file_sd"]).read_text())
            assert [t["labels"]["node"] for t in targets] == ["0", "1"]

            # node loss is no fault of the node's daemon: other faults refuse it, clear does not undo it
            again = fault(cluster, "node-down", "--node", "1")
            assert again.returncode == 1 and one_clear_line(again.stderr) and "node 1 is down already" in again.stderr
            slow = fault(cluster, "slow", "--factor", "2", "--node", "1")
            assert slow.returncode == 1 and one_clear_line(slow.stderr), slow.stderr
            assert "node 1 is down" in slow.stderr and "cluster node-up --node 1" in slow.stderr
            assert fault(cluster, "clear", "--node", "0").returncode == 0
            assert status(cluster)["nodes"][1]["down"]
            assert client(node0).get("/snapshot")["hardware_counters"][0]["mem_ecc_corrected"] == 1

            # back: a new daemon at the same address, the same identity, the exporter on the same port
            up = cluster_cmd(cluster.runtime, "node-up", "--node", "1")
            assert up.returncode == 0, up.stderr
            assert up.stdout.startswith(f"neuron-emulator: node 1 ({node1['instance_id']}) is up again")
            back = status(cluster)["nodes"][1]
            assert back["daemon_up"] and back["exporter_ready"] and not back["down"]
            assert back["exporter_port"] == node1["exporter_port"] and back["processes"] == 0
            assert client(node1).get("/status")["instance_id"] == node1["instance_id"]
            instance = json.loads(get(node1["exporter_url"].replace("/metrics", "/api/v1/instance"))[1])
            assert instance["instance"]["instance_id"] == node1["instance_id"]
            assert client(node0).get("/snapshot")["hardware_counters"][0]["mem_ecc_corrected"] == 1
            # and a process attaches to it again
            again1 = hold(cluster, 1)
            try:
                holding(again1)
                assert wait_until(lambda: status(cluster)["nodes"][1]["processes"] == 1, timeout=5)
            finally:
                assert release(again1) == 0
        finally:
            for proc in (on0, on1):
                release(proc)
        assert on0.returncode == 0  # it ran until released


def test_a_cluster_with_a_node_down_and_up_again_stops_cleanly() -> None:
    with running_cluster("--nodes", "2", "--instance-type", "trn1.2xlarge") as cluster:
        assert fault(cluster, "node-down", "--node", "0").returncode == 0
        # the node's address given as NEURON_EMULATOR_ADDR instead of --node: the same node
        again = fault(cluster, "node-down", address=cluster.nodes[1]["address"])
        assert again.returncode == 0, again.stderr
        assert "runtime processes killed: none was attached" in again.stdout
        assert all(n["down"] for n in status(cluster)["nodes"])
        assert cluster_cmd(cluster.runtime, "node-up", "--node", "1").returncode == 0
        down = cluster_cmd(cluster.runtime, "down")
        assert down.returncode == 0, down.stderr
        assert host_gone(cluster.status["pid"])
        assert sorted(p.name for p in cluster.runtime.iterdir()) == ["neuron-emulator-cluster.log"]


def test_tool_env_keeps_this_checkout() -> None:
    """The console scripts the tests start import this checkout (PYTHONPATH is passed on)."""
    out = subprocess.run(
        [sys.executable, "-c", "import emulator.cluster.fleet as f; print(f.__file__)"],
        env=tool_env(None),
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(Path(__file__).parents[1] / "emulator" / "cluster" / "fleet.py")


def _prometheus(port: int, path: str) -> Any:
    url = f"http://127.0.0.1:{port}/api/v1/{path}"
    with urllib.request.urlopen(url, timeout=5) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return body["data"]


@pytest.mark.skipif(PROMETHEUS is None, reason="Debian package 'prometheus' not installed")
def test_prometheus_sees_the_lost_node_down_and_its_exporter_down_alert_fires(tmp_path: Path) -> None:
    """The documented scrape config (docs/cluster.md) and the shipped alert rules (for: 2 s) against a
    real Prometheus: after node-down, node 1's target stays with up == 0 and NeuronNodeExporterDown
    (dashboards/fleet-alerts.yml) fires for it; node 0 stays up."""
    from tests.test_prometheus_e2e import fast_rules

    with running_cluster("--nodes", "2", "--instance-type", "trn1.2xlarge") as cluster:
        doc = (ROOT / "docs" / "cluster.md").read_text()
        scrape = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
        scrape = scrape.replace("/run/user/1000/neuron-emulator-cluster/file_sd.json", cluster.status["file_sd"])
        scrape = scrape.replace("scrape_interval: 15s", "scrape_interval: 1s").replace("refresh_interval: 30s", "")
        rules = fast_rules(ROOT / "dashboards" / "fleet-alerts.yml", tmp_path / "fleet-alerts.yml")
        config = tmp_path / "prometheus.yml"
        config.write_text(f"global:\n  evaluation_interval: 1s\nrule_files: ['{rules}']\n{scrape}")
        port = free_port()
        prom = subprocess.Popen(
            prometheus_argv(config, tmp_path / "tsdb", port),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

        def up() -> dict[str, str]:
            try:
                result = _prometheus(port, "query?" + urllib.parse.urlencode({"query": "up"}))["result"]
            except OSError:
                return {}
            return {r["metric"].get("node", "?"): r["value"][1] for r in result}

        def firing() -> list[dict[str, str]]:
            alerts = _prometheus(port, "alerts")["alerts"]
            return [
                a["labels"]
                for a in alerts
                if a["state"] == "firing" and a["labels"]["alertname"] == "NeuronNodeExporterDown"
            ]

        try:
            assert wait_until(lambda: up() == {"0": "1", "1": "1"}, timeout=60, interval=0.5), up()
            down = fault(cluster, "node-down", "--node", "1")
            assert down.returncode == 0, down.stderr
            assert wait_until(lambda: up() == {"0": "1", "1": "0"}, timeout=30, interval=0.5), up()
            assert wait_until(lambda: bool(firing()), timeout=30, interval=0.5)
            (alert,) = firing()
            assert alert["node"] == "1" and alert["job"] == "neuron-cluster"
            assert alert["instance_id"] == cluster.nodes[1]["instance_id"]
        finally:
            prom.send_signal(signal.SIGTERM)
            wait_or_kill(prom, 15)
