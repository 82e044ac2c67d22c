"""The daemon's life: up/down/status, one daemon per socket, stale sockets, signals, TCP, its API."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from neurontools.sources.address import parse_address
from neurontools.sources.daemon_client import DaemonClient, DaemonError
from tests.support import (
    BIN,
    execution_report,
    free_port,
    one_clear_line,
    run_tool,
    start_daemon,
    start_holder,
    tool_env,
    wait_until,
)


def test_detach_returns_once_the_daemon_answers_and_down_stops_it(short_tmp: Path) -> None:
    address = str(short_tmp / "d.sock")
    up = run_tool(["neuron-emulator", "up", "--instance-type", "trn1.32xlarge", "--detach"], address)
    assert up.returncode == 0, up.stderr
    assert f"up at {address}" in up.stdout
    # answers immediately: no sleep between up --detach and the first tool
    ls = run_tool(["neuron-ls", "-j"], address)
    assert ls.returncode == 0 and len(json.loads(ls.stdout)) == 16
    status = run_tool(["neuron-emulator", "status"], address)
    assert status.returncode == 0 and "trn1.32xlarge" in status.stdout and "0 of 32 in use" in status.stdout
    daemon_pid = DaemonClient(parse_address(address)).get("/status")["daemon_pid"]
    down = run_tool(["neuron-emulator", "down"], address)
    assert down.returncode == 0, down.stderr
    assert not os.path.exists(address) and not os.path.exists(address + ".lock")
    assert not Path(f"/proc/{daemon_pid}").exists() or "Z" in Path(f"/proc/{daemon_pid}/stat").read_text().split()[2]
    # status and down now say there is none
    status = run_tool(["neuron-emulator", "status"], address)
    assert status.returncode == 1 and "no daemon running" in status.stdout
    down = run_tool(["neuron-emulator", "down"], address)
    assert down.returncode == 1 and one_clear_line(down.stderr)


def test_flags_find_the_daemon_like_the_env_var(short_tmp: Path) -> None:
    address = str(short_tmp / "f.sock")
    up = run_tool(["neuron-emulator", "up", "--detach", "--socket", address], None)
    assert up.returncode == 0, up.stderr
    try:
        assert run_tool(["neuron-emulator", "status", "--socket", address], None).returncode == 0
        assert run_tool(["neuron-ls"], address).returncode == 0  # NEURON_EMULATOR_ADDR
    finally:
        assert run_tool(["neuron-emulator", "down", "--socket", address], None).returncode == 0


def test_default_socket_under_xdg_runtime_dir(short_tmp: Path) -> None:
    env = {"XDG_RUNTIME_DIR": str(short_tmp)}
    up = run_tool(["neuron-emulator", "up", "--detach"], None, **env)
    assert up.returncode == 0, up.stderr
    try:
        assert (short_tmp / "neuron-emulator.sock").exists()
        assert run_tool(["neuron-ls"], None, **env).returncode == 0
    finally:
        assert run_tool(["neuron-emulator", "down"], None, **env).returncode == 0


def test_second_up_on_a_live_socket_fails_and_leaves_the_first_alone(daemon) -> None:
    for detach in ([], ["--detach"]):
        again = run_tool(["neuron-emulator", "up", *detach], daemon.address)
        assert again.returncode == 1
        assert one_clear_line(again.stderr)
        assert "already running" in again.stderr and str(daemon.proc.pid) in again.stderr
    assert daemon.proc.poll() is None and daemon.answers()


def test_stale_socket_from_a_crashed_daemon_is_replaced(short_tmp: Path) -> None:
    crashed = start_daemon(short_tmp, "trn1.2xlarge")
    crashed.stop(signal.SIGKILL)  # no clean-up: the socket file stays behind
    assert os.path.exists(crashed.address)
    assert run_tool(["neuron-ls"], crashed.address).returncode == 1  # nothing answers on it
    fresh = start_daemon(short_tmp, "trn1.32xlarge")
    try:
        assert "replaced stale socket" in fresh.log_text()
        assert fresh.client.get("/status")["instance_type"] == "trn1.32xlarge"
    finally:
        assert fresh.stop() == 0


def test_socket_path_that_is_not_a_socket_is_refused(short_tmp: Path) -> None:
    path = short_tmp / "regular.sock"
    path.write_text("not a socket")
    up = run_tool(["neuron-emulator", "up"], str(path))
    assert up.returncode == 1 and one_clear_line(up.stderr) and "is not a socket" in up.stderr
    assert path.read_text() == "not a socket"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_shut_down_cleanly_and_remove_the_socket(sig: int, short_tmp: Path, holders) -> None:
    daemon = start_daemon(short_tmp, "trn1.2xlarge")
    holder = start_holder(daemon.address, short_tmp)
    holders.append(holder)
    assert daemon.stop(sig) == 0
    assert not os.path.exists(daemon.address)
    assert "Traceback" not in daemon.log_text()
    # the attached process is not hurt by the daemon going away, and exits normally
    assert holder.proc.poll() is None
    assert holder.release() == 0


def test_tcp_loopback_address(short_tmp: Path, holders) -> None:
    port = free_port()
    address = f"http://127.0.0.1:{port}"
    daemon = start_daemon(short_tmp, "trn1.2xlarge", address=address)
    try:
        holder = start_holder(address, short_tmp)
        holders.append(holder)
        assert holder.attached
        out = run_tool(["neuron-ls", "-j"], address)
        assert out.returncode == 0
        assert json.loads(out.stdout)[0]["neuron_processes"][0]["pid"] == holder.pid
        again = run_tool(["neuron-emulator", "up", "--port", str(port)], None)
        assert again.returncode == 1 and "already running" in again.stderr
    finally:
        assert daemon.stop() == 0


def test_identity_flags_and_defaults(short_tmp: Path) -> None:
    daemon = start_daemon(
        short_tmp,
        "trn1n.32xlarge",
        extra=[
            "--instance-id",
            "i-0123456789abcdef0",
            "--availability-zone",
            "us-east-1b",
            "--subnet-id",
            "subnet-0abc12345",
        ],
    )
    try:
        inv = daemon.client.get("/inventory")
        assert inv["instance"]["instance_id"] == "i-0123456789abcdef0"
        assert inv["instance"]["instance_type"] == "trn1n.32xlarge"
        assert inv["instance"]["instance_region"] == "us-east-1"
        assert inv["instance"]["instance_availability_zone"] == "us-east-1b"
        assert inv["instance"]["subnet_id"] == "subnet-0abc12345"
        assert inv["instance"]["ami_id"].startswith("ami-")
        assert inv["hardware"]["neuron_device_count"] == 16
    finally:
        daemon.stop()
    # defaults are stable for the same host, type and address
    first = start_daemon(short_tmp, "trn1.2xlarge", extra=["--instance-id", "i-0aaaaaaaaaaaaaaaa"])
    ami = first.client.get("/inventory")["instance"]["ami_id"]
    first.stop()
    second = start_daemon(short_tmp, "trn1.2xlarge", extra=["--instance-id", "i-0aaaaaaaaaaaaaaaa"])
    try:
        assert second.client.get("/inventory")["instance"]["ami_id"] == ami
    finally:
        second.stop()


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["up", "--instance-type", "trn9.huge"], 2, "invalid choice"),
        (["up", "--instance-id", "i-xyz"], 1, "instance"),
        (["up", "--availability-zone", "mars-1a"], 1, ""),
        (["up", "--port", "70000"], 1, "--port 70000"),
        (["up", "--socket", "/nonexistent-dir/x.sock"], 1, "does not exist"),
        (["up", "--socket", "/tmp/x.sock", "--port", "9"], 2, "not allowed with"),
        (["frobnicate"], 2, "invalid choice"),
        ([], 2, "required"),
        (["status", "--bogus"], 2, "unrecognized arguments"),
    ],
)
def test_bad_emulator_input_is_one_line(argv: list[str], code: int, message: str, short_tmp: Path) -> None:
    out = run_tool(["neuron-emulator", *argv], str(short_tmp / "x.sock"))
    assert out.returncode == code, out.stderr
    assert one_clear_line(out.stderr), out.stderr
    assert message in out.stderr


def test_http_api_is_versioned_documented_and_errors_are_json(daemon) -> None:
    client = daemon.client
    schema = client.request("GET", "/openapi.json", versioned=False)
    paths = set(schema["paths"])
    assert {"/v1/status", "/v1/inventory", "/v1/processes", "/v1/processes/{pid}"} <= paths
    assert "NeuronProcess" in schema["components"]["schemas"]
    with pytest.raises(DaemonError) as err:
        client.get("/processes/999999")
    assert err.value.status == 404 and err.value.body == {"error": "process 999999 is not attached"}
    with pytest.raises(DaemonError) as err:
        client.get("/no-such-thing")
    assert err.value.status == 404 and err.value.body["error"] == "not found"
    with pytest.raises(DaemonError) as err:
        client.post("/processes", {"pid": "x", "command": "c"})
    assert err.value.status == 422 and "pid" in err.value.body["error"]
    with pytest.raises(DaemonError) as err:
        client.post("/processes", {"pid": 1, "command": "c", "surprise": True})
    assert err.value.status == 422
    with pytest.raises(DaemonError) as err:  # on the socket a process attaches only itself (docs/security.md)
        client.post("/processes", {"pid": 4194304, "command": "ghost"})
    assert err.value.status == 403 and "only itself" in err.value.body["error"]
    with pytest.raises(DaemonError) as err:
        client.delete("/processes/999999")
    assert err.value.status == 404


@contextlib.contextmanager
def attached_self(daemon) -> Iterator[int]:
    """Attach this test process (on the socket a process may attach only itself), release it after."""
    pid = os.getpid()
    daemon.client.post("/processes", {"pid": pid, "command": "pytest", "runtime_version": "2.29.14"})
    try:
        yield pid
    finally:
        with contextlib.suppress(DaemonError):
            daemon.client.delete(f"/processes/{pid}")


def test_attaching_twice_is_refused(daemon) -> None:
    body = {"pid": os.getpid(), "command": "pytest", "runtime_version": "2.29.14"}
    try:
        assert daemon.client.post("/processes", body)["neuroncores"] == [0, 1]
        with pytest.raises(DaemonError) as err:
            daemon.client.post("/processes", body)
        assert err.value.status == 409 and "already attached" in err.value.body["error"]
    finally:
        daemon.client.delete(f"/processes/{os.getpid()}")
    assert daemon.processes() == []


def test_no_daemon_neuron_ls_says_how_to_start_one(short_tmp: Path) -> None:
    out = run_tool(["neuron-ls"], str(short_tmp / "none.sock"))
    assert out.returncode == 1
    assert out.stdout == ""
    assert one_clear_line(out.stderr)
    assert "neuron-emulator up" in out.stderr and "NEURON_EMULATOR_ADDR" in out.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["-x"], "unknown flag `x'"),
        (["-wz"], "unknown flag `z'"),
        (["--long"], "unknown flag `long'"),
        (["--wide=1"], "bool flag `wide' cannot have an argument"),
        (["extra"], "unexpected argument `extra' (neuron-ls takes no arguments)"),
    ],
)
def test_neuron_ls_bad_flags(flags: list[str], message: str, daemon) -> None:
    out = run_tool(["neuron-ls", *flags], daemon.address)
    assert out.returncode == 1
    assert out.stdout.strip() == message  # go-flags reports on stdout
    assert out.stderr == ""


def test_neuron_ls_help_and_combined_short_flags(daemon) -> None:
    out = run_tool(["neuron-ls", "--help"], daemon.address)
    assert out.returncode == 0 and "--show-all-procs" in out.stdout and "NEURON_EMULATOR_ADDR" in out.stdout
    combined = run_tool(["neuron-ls", "-ja"], daemon.address)
    separate = run_tool(["neuron-ls", "-j", "-a"], daemon.address)
    assert combined.returncode == separate.returncode == 0
    assert json.loads(combined.stdout)[0]["neuron_processes"][0]["command"] == "neuron-ls -ja"


def test_neuron_ls_into_a_closed_pipe_is_quiet(daemon) -> None:
    proc = subprocess.run(
        f"'{BIN / 'neuron-ls'}' -a | head -c 10",
        shell=True,
        env=tool_env(daemon.address),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.stdout == "instance-t"
    assert "Traceback" not in proc.stderr


def test_ecc_faults_on_demand_show_in_the_snapshot(daemon_factory) -> None:
    daemon = daemon_factory("trn1.32xlarge")
    after = daemon.client.post("/faults/ecc", {"neuron_device": 3, "event_type": "mem_ecc_uncorrected", "count": 2})
    assert after["mem_ecc_uncorrected"] == 2
    counters = daemon.client.get("/snapshot")["hardware_counters"]
    assert counters[3]["mem_ecc_uncorrected"] == 2 and counters[2]["mem_ecc_uncorrected"] == 0
    with pytest.raises(DaemonError) as err:
        daemon.client.post("/faults/ecc", {"neuron_device": 16, "event_type": "mem_ecc_uncorrected"})
    assert err.value.status == 400 and "does not exist" in err.value.body["error"]
    with pytest.raises(DaemonError) as err:
        daemon.client.post("/faults/ecc", {"neuron_device": 0, "event_type": "bogus"})
    assert err.value.status == 422


def test_snapshot_latencies_since_lists_only_later_executions(daemon) -> None:
    with attached_self(daemon) as pid:
        base = daemon.client.get("/snapshot")["monotonic"]
        for start in (base - 3.0, base - 2.0, base - 1.0):  # ends: base - 2.5, - 1.5, - 0.5
            daemon.client.post(f"/processes/{pid}/executions", execution_report(start, 0.5))
        full = daemon.client.get("/snapshot")
        trimmed = daemon.client.get(f"/snapshot?latencies_since={base - 1.5!r}")
        (proc,) = [p for p in full["processes"] if p["pid"] == pid]
        (trimmed_proc,) = [p for p in trimmed["processes"] if p["pid"] == pid]
        assert [round(lat[0] - base, 3) for lat in proc["latencies"]] == [-2.5, -1.5, -0.5]
        assert trimmed_proc["latencies"] == proc["latencies"][2:]  # ended strictly after the time given
        assert [entry[0] for entry in full["latency_log"]] == [1, 2, 3]
        assert trimmed["latency_log"] == full["latency_log"][2:]
        assert trimmed_proc["executions"] == proc["executions"]  # counters are never trimmed


def test_execution_report_with_partial_memory_is_refused_and_counts_nothing(daemon) -> None:
    with attached_self(daemon) as pid:
        bad = {**execution_report(daemon.client.get("/snapshot")["monotonic"], 0.1), "memory": {"core": {"tensors": 1}}}
        with pytest.raises(DaemonError) as err:
            daemon.client.post(f"/processes/{pid}/executions", bad)
        # the Execution type needs every category: a 422 naming the first one missing
        assert err.value.status == 422 and "memory.core.constants" in err.value.body["error"]
        (proc,) = [p for p in daemon.client.get("/snapshot")["processes"] if p["pid"] == pid]
        assert sum(proc["executions"].values()) == 0 and proc["latencies"] == []


def test_batched_executions_count_when_they_start_with_their_link_bytes(daemon) -> None:
    with attached_self(daemon) as pid:
        now = daemon.client.get("/snapshot")["monotonic"]
        ring = {"kind": "all_reduce", "bytes": 1000, "ranks": 4, "link_bytes": {"intra_chip": 0, "neuronlink": 750}}
        past, future = execution_report(now - 1.0, 0.5), {**execution_report(now + 1.0, 0.5), "collectives": [ring]}
        daemon.client.post(f"/processes/{pid}/executions/batch", {"executions": [past, future]})

        def mine() -> dict:
            return next(p for p in daemon.client.get("/snapshot")["processes"] if p["pid"] == pid)

        early = mine()
        assert early["executions"]["completed"] == 1  # the second has not started yet
        assert early["cores"]["0"]["busy"] == pytest.approx(0.5)
        assert early["collectives"]["neuronlink"] == {"bytes": 0, "operations": 0, "seconds": 0.0}
        assert wait_until(lambda: mine()["executions"]["completed"] == 2, timeout=5)
        assert wait_until(lambda: mine()["cores"]["0"]["busy"] == pytest.approx(1.0), timeout=5)
        # the ring's bytes that crossed NeuronLink, not the payload
        assert mine()["collectives"]["neuronlink"] == {"bytes": 750, "operations": 1, "seconds": 0.0}
        bad = {"executions": [past, {**future, "core": 5}]}
        with pytest.raises(DaemonError) as err:
            daemon.client.post(f"/processes/{pid}/executions/batch", bad)
        assert err.value.status == 400 and mine()["executions"]["completed"] == 2  # all or nothing


def test_a_collective_entry_with_a_count_stands_for_that_many(daemon) -> None:
    with attached_self(daemon) as pid:
        now = daemon.client.get("/snapshot")["monotonic"]
        ring = {
            "kind": "all_reduce",
            "bytes": 100,
            "ranks": 8,
            "count": 128,
            "seconds": 0.001,
            "link_bytes": {"neuronlink": 175},
        }
        daemon.client.post(f"/processes/{pid}/executions", {**execution_report(now - 1, 0.1), "collectives": [ring]})
        (proc,) = [p for p in daemon.client.get("/snapshot")["processes"] if p["pid"] == pid]
        link = proc["collectives"]["neuronlink"]
        assert link == {"bytes": 175 * 128, "operations": 128, "seconds": pytest.approx(0.128)}
        assert proc["collectives"]["efa"]["seconds"] == 0.0  # on one node: time on NeuronLink
