"""`neuron-emulator cluster`: N emulated nodes, each with its own identity, daemon address and
neuron-exporter, served by one host process (docs/cluster.md).

Every cluster here lives in a temporary runtime directory of its own (``XDG_RUNTIME_DIR``), which
its clients share (the node sockets, the state and target files are there). The cluster command
runs as ``python -m emulator.cli`` with this checkout on the path; the tools (neuron-ls) as the
console scripts a user runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import HELPERS, one_clear_line, reap, run_tool, tool_env, wait_until

PROMTOOL = shutil.which("promtool")
STATE_NAME = "neuron-emulator-cluster.json"


def cluster_cmd(runtime: Path, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "emulator.cli", "cluster", *argv],
        env=tool_env(None, {"XDG_RUNTIME_DIR": str(runtime)}),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def sockets_under(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if stat.S_ISSOCK(p.lstat().st_mode)]


def host_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.status, resp.read().decode()


def metrics(node: dict[str, Any]) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    status, text = get(node["exporter_url"])
    assert status == 200
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@dataclass
class Cluster:
    runtime: Path
    status: dict[str, Any]

    @property
    def nodes(self) -> list[dict[str, Any]]:
        return self.status["nodes"]

    def env(self, node: int, **extra: str) -> dict[str, str]:
        return tool_env(self.nodes[node]["address"], {"XDG_RUNTIME_DIR": str(self.runtime), **extra})


@contextlib.contextmanager
def running_cluster(*argv: str) -> Iterator[Cluster]:
    """``cluster up --detach`` in a fresh runtime directory; afterwards nothing of it is left."""
    runtime = Path(tempfile.mkdtemp(prefix="nt-cl-", dir="/tmp"))  # 0700, short socket paths
    pid = None
    try:
        up = cluster_cmd(runtime, "up", "--detach", *argv)
        assert up.returncode == 0, up.stderr
        status = cluster_cmd(runtime, "status", "--json")
        assert status.returncode == 0, status.stderr + status.stdout
        cluster = Cluster(runtime, json.loads(status.stdout))
        pid = cluster.status["pid"]
        yield cluster
    finally:
        if (runtime / STATE_NAME).exists():
            cluster_cmd(runtime, "down")
        if pid is not None and not host_gone(pid):  # a failed test must not leave the host running
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(runtime, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster3() -> Iterator[Cluster]:
    with running_cluster("--nodes", "3") as cluster:
        yield cluster


# -- the command line -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nodes", "0"], "0 nodes is out of range (expected 1 to 64)"),
        (["--nodes", "65"], "65 nodes is out of range (expected 1 to 64)"),
        (["--nodes", "two"], "invalid node count 'two'"),
        ([], "the following arguments are required: --nodes"),
        (["--nodes", "2", "--instance-type", "p4d.24xlarge"], "invalid choice"),
        (["--nodes", "60", "--exporter-port-base", "65500"], "need ports up to 65559"),
    ],
)
def test_bad_flags_are_one_clear_line(argv: list[str], message: str, short_tmp: Path) -> None:
    up = cluster_cmd(short_tmp, "up", *argv)
    assert up.returncode == 2
    assert one_clear_line(up.stderr), up.stderr
    assert message in up.stderr
    assert up.stdout == ""
    assert list(short_tmp.iterdir()) == []  # nothing started, nothing written


def test_status_and_down_without_a_cluster_say_so(short_tmp: Path) -> None:
    status = cluster_cmd(short_tmp, "status")
    assert status.returncode == 1
    assert status.stdout.startswith("neuron-emulator: no cluster running")
    down = cluster_cmd(short_tmp, "down")
    assert down.returncode == 1
    assert one_clear_line(down.stderr) and "no cluster running" in down.stderr


# -- a running cluster of three nodes -------------------------------------------------------------


def test_status_lists_every_node_with_its_own_identity_and_addresses(cluster3: Cluster) -> None:
    nodes = cluster3.nodes
    assert [n["index"] for n in nodes] == [0, 1, 2]
    for key in ("instance_id", "address", "exporter_url"):
        assert len({n[key] for n in nodes}) == 3, key
    assert all(n["instance_id"].startswith("i-0") and len(n["instance_id"]) == 19 for n in nodes)
    assert all(n["instance_type"] == "trn1.32xlarge" for n in nodes)
    assert all(n["daemon_up"] and n["exporter_ready"] and n["neuroncores_total"] == 32 for n in nodes)
    assert {n["pid"] for n in nodes} == {cluster3.status["pid"]}  # one host process serves them all
    assert psutil.Process(cluster3.status["pid"]).children() == []
    # the table: one row per node, with its instance id, address and exporter
    table = cluster_cmd(cluster3.runtime, "status")
    assert table.returncode == 0
    for n in nodes:
        row = next(line for line in table.stdout.splitlines() if n["instance_id"] in line)
        assert n["address"] in row and n["exporter_url"] in row


def test_each_node_answers_at_its_address_as_a_single_daemon_does(cluster3: Cluster) -> None:
    node = cluster3.nodes[2]
    ls = run_tool(["neuron-ls"], node["address"], XDG_RUNTIME_DIR=str(cluster3.runtime))
    assert ls.returncode == 0, ls.stderr
    assert ls.stdout.splitlines()[:2] == ["instance-type: trn1.32xlarge", f"instance-id: {node['instance_id']}"]
    ls_json = run_tool(["neuron-ls", "-j", "-a"], node["address"], XDG_RUNTIME_DIR=str(cluster3.runtime))
    assert ls_json.returncode == 0, ls_json.stderr
    devices = json.loads(ls_json.stdout)
    assert len(devices) == 16 and sum(d["nc_count"] for d in devices) == 32
    # the node's own exporter is registered with it (as a tool), and with no other node
    tools = [p for d in devices for p in d["neuron_processes"] if p["pid"] == cluster3.status["pid"]]
    assert {p["command"] for p in tools} == {f"neuron-exporter --port {node['exporter_port']} (node 2)"}, tools
    # the exporter's REST API reads the same node
    status, body = get(node["exporter_url"].replace("/metrics", "/api/v1/instance"))
    assert status == 200
    assert json.loads(body)["instance"]["instance_id"] == node["instance_id"]


def test_a_training_process_on_node_1_shows_in_node_1s_exporter_only(cluster3: Cluster) -> None:
    holder = subprocess.Popen(
        [sys.executable, str(HELPERS / "hold_hbm.py"), "1.5"],
        env=cluster3.env(1, NEURON_RT_VISIBLE_CORES="2"),  # NeuronCore 2: device 1
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert line.startswith("holding "), line + (holder.stderr.read() if holder.poll() is not None else "")
        held = int(line.split()[1])
        node0, node1 = cluster3.nodes[0], cluster3.nodes[1]
        tensors = ("neurondevice_hbm_used_bytes", frozenset({("category", "tensors"), ("neuron_device", "1")}))
        assert wait_until(lambda: metrics(node1)[tensors] >= held, timeout=10), metrics(node1)[tensors]
        assert metrics(node0)[tensors] == 0
        processes = node1["exporter_url"].replace("/metrics", "/api/v1/processes")
        assert [p["pid"] for p in json.loads(get(processes)[1])] == [holder.pid]
        assert json.loads(get(node0["exporter_url"].replace("/metrics", "/api/v1/processes"))[1]) == []
        tagged = [key for key in metrics(node1) if ("runtime_tag", str(holder.pid)) in key[1]]
        assert tagged  # the neuron-monitor-compatible families name it too
        assert not [key for key in metrics(node0) if ("runtime_tag", str(holder.pid)) in key[1]]
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        if holder.wait(timeout=15) != 0:
            holder.kill()


def test_prometheus_targets_file_names_every_exporter(cluster3: Cluster) -> None:
    path = Path(cluster3.status["file_sd"])
    assert path.parent == cluster3.runtime / "neuron-emulator-cluster"
    groups = json.loads(path.read_text())
    assert len(groups) == 3
    for group, node in zip(groups, cluster3.nodes, strict=True):
        assert group["targets"] == [f"127.0.0.1:{node['exporter_port']}"]
        assert node["exporter_url"] == f"http://127.0.0.1:{node['exporter_port']}/metrics"
        assert group["labels"]["node"] == str(node["index"])
        assert group["labels"]["instance_id"] == node["instance_id"]


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package 'prometheus') not installed")
def test_the_documented_scrape_config_reads_the_targets_file(cluster3: Cluster, tmp_path: Path) -> None:
    doc = (Path(__file__).parents[1] / "docs" / "cluster.md").read_text()
    config = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    default = "/run/user/1000/neuron-emulator-cluster/file_sd.json"
    assert default in config
    (tmp_path / "prometheus.yml").write_text(config.replace(default, cluster3.status["file_sd"]))
    check = subprocess.run([PROMTOOL, "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_second_cluster_is_refused_while_one_runs(cluster3: Cluster) -> None:
    up = cluster_cmd(cluster3.runtime, "up", "--nodes", "2", "--detach")
    assert up.returncode == 1
    assert one_clear_line(up.stderr)
    assert f"already running (host pid {cluster3.status['pid']})" in up.stderr


# -- stopping -------------------------------------------------------------------------------------


def test_down_leaves_no_process_socket_or_file() -> None:
    with running_cluster("--nodes", "2", "--instance-type", "trn1.2xlarge") as cluster:
        pid = cluster.status["pid"]
        assert sorted(p.name for p in sockets_under(cluster.runtime)) == ["control.sock", "node-0.sock", "node-1.sock"]
        down = cluster_cmd(cluster.runtime, "down")
        assert down.returncode == 0, down.stderr
        assert down.stdout == f"neuron-emulator: stopped the cluster of 2 nodes (host pid {pid})\n"
        assert host_gone(pid)
        assert sockets_under(cluster.runtime) == []
        assert sorted(p.name for p in cluster.runtime.iterdir()) == ["neuron-emulator-cluster.log"]
        status = cluster_cmd(cluster.runtime, "status")
        assert status.returncode == 1


def _foreground_host(short_tmp: Path, nodes: int, **popen: Any) -> subprocess.Popen:
    """``neuron-emulator cluster up`` of trn1.2xlarge nodes in the foreground, its state under ``short_tmp``."""
    argv = [sys.executable, "-m", "emulator.cli", "cluster", "up", "--nodes", str(nodes), "-i", "trn1.2xlarge"]
    env = tool_env(None, {"XDG_RUNTIME_DIR": str(short_tmp)})
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, **popen)


def test_foreground_host_stops_cleanly_on_sigterm(short_tmp: Path) -> None:
    host = _foreground_host(short_tmp, 2, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: (short_tmp / STATE_NAME).exists() or host.poll() is not None, timeout=30)
        state = json.loads((short_tmp / STATE_NAME).read_text())
        assert state["pid"] == host.pid and len(sockets_under(short_tmp)) == 3  # 2 nodes and the host's control
        host.send_signal(signal.SIGTERM)
        out, err = host.communicate(timeout=30)
    finally:
        reap(host)
    assert host.returncode == 0, err
    assert "node-1.sock" in out  # the node table, printed once the nodes listen
    assert err.strip().endswith("neuron-emulator: cluster stopped (SIGTERM)")
    assert list(short_tmp.iterdir()) == []


def test_a_killed_host_is_detected_and_cleaned_up(short_tmp: Path) -> None:
    host = _foreground_host(short_tmp, 1, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: (short_tmp / STATE_NAME).exists() or host.poll() is not None, timeout=30)
    finally:
        host.kill()
        host.wait()
    assert len(sockets_under(short_tmp)) == 2  # the node's and the control socket: nobody ran the host's cleanup
    status = cluster_cmd(short_tmp, "status")
    assert status.returncode == 1 and f"its host (pid {host.pid}) is gone" in status.stdout
    down = cluster_cmd(short_tmp, "down")
    assert down.returncode == 0 and "was gone" in down.stdout
    assert list(short_tmp.iterdir()) == []
