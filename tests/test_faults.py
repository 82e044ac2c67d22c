"""``neuron-emulator fault {slow,nan,ecc,efa,clear}`` on one node (docs/faults.md): a real-math
training process slows down, produces numerical errors and dies of an uncorrectable ECC error;
clear restores it; bad flags are one line; only the daemon's owner may inject."""

from __future__ import annotations

import grp
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support import BIN, HELPERS, free_port, one_clear_line, reap, run_tool, start_daemon, tool_env, wait_until
from tests.test_security import as_other_user, group_dir, needs_root, other_user

__all__ = ["group_dir"]  # the fixture, for the test that acts as another user

MAX_LINES = 20_000  # steps a training process may run ahead of the test (pipe backlog) before a fault shows


def _next_step(proc: subprocess.Popen[str], until: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Read the training loop's step lines until one satisfies ``until``."""
    assert proc.stdout is not None
    for _ in range(MAX_LINES):
        line = proc.stdout.readline()
        assert line, f"the training process ended: {proc.stderr.read() if proc.stderr else ''}"
        step = json.loads(line)
        if "device_seconds" in step and until(step):
            return step
    raise AssertionError("no such step")


def _fault(daemon_address: str, *argv: str) -> subprocess.CompletedProcess[str]:
    out = run_tool(["neuron-emulator", "fault", *argv], daemon_address)
    assert out.returncode == 0, out.stderr
    return out


def _process_counts(snapshot: dict[str, Any], pid: int) -> tuple[dict[str, int], dict[str, int]]:
    """Executions by outcome and error_summary of ``pid``, live or (once gone) in the retired totals."""
    for proc in snapshot["processes"]:
        if proc["pid"] == pid:
            return proc["executions"], proc["errors"]
    return snapshot["retired"]["executions"], snapshot["retired"]["errors"]


def test_slow_nan_clear_and_ecc_on_a_real_math_process(daemon, short_tmp: Path) -> None:
    script = short_tmp / "train_loop.py"
    script.write_text((HELPERS / "train_loop.py").read_text())
    proc = subprocess.Popen(
        [sys.executable, str(script), "--steps", "1000000", "--width", "32", "--batch", "8", "--lr", "0.0001"],
        env=tool_env(daemon.address),
        cwd=short_tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = _next_step(proc, lambda s: s["step"] >= 3)["device_seconds"]
        assert base > 0

        out = _fault(daemon.address, "slow", "--factor", "2")
        assert "nc0-nc1: executions take 2x their device time" in out.stdout
        slowed = _next_step(proc, lambda s: s["device_seconds"] != base)
        assert slowed["device_seconds"] == pytest.approx(2 * base, rel=1e-9)
        after = _next_step(proc, lambda s: True)  # and it stays so until cleared
        assert after["device_seconds"] == pytest.approx(2 * base, rel=1e-9)
        assert "slow x2" in run_tool(["neuron-emulator", "status"], daemon.address).stdout

        _fault(daemon.address, "clear")
        restored = _next_step(proc, lambda s: s["device_seconds"] == pytest.approx(base, rel=1e-9))
        assert restored["outcome"] == "completed"

        _fault(daemon.address, "nan", "--core", "0")
        assert _next_step(proc, lambda s: s["outcome"] != "completed")["outcome"] == "completed_with_num_err"
        executions, errors = _process_counts(daemon.client.get("/snapshot"), proc.pid)
        assert executions["completed_with_num_err"] >= 1 and errors["numerical"] == executions["completed_with_num_err"]
        _fault(daemon.address, "clear")
        _next_step(proc, lambda s: s["outcome"] == "completed")  # normal executions again
        assert daemon.client.get("/faults") == {"efa_bandwidth_factor": 1.0, "cores": []}

        out = _fault(daemon.address, "ecc", "--core", "0")  # default type: mem_ecc_uncorrected
        assert "device 0: mem_ecc_uncorrected = 1" in out.stdout
        assert "nc0: the next execution fails with NRT_EXEC_HW_ERR_HBM_UE" in out.stdout
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.read()  # the steps it still ran
        assert proc.wait(timeout=30) == 1
        stderr = proc.stderr.read()
    finally:
        reap(proc)
    assert "Traceback" not in stderr
    (last,) = [ln for ln in stderr.splitlines() if ln.startswith("train_loop:")]
    assert "NRT_EXEC_HW_ERR_HBM_UE" in last and "nc0" in last and "uncorrectable ECC error" in last
    assert wait_until(lambda: daemon.processes() == [], timeout=5)
    snapshot = daemon.client.get("/snapshot")
    executions, errors = _process_counts(snapshot, proc.pid)
    assert errors["hardware"] == 1 and executions["completed_with_err"] == 1
    assert snapshot["hardware_counters"][0]["mem_ecc_uncorrected"] == 1
    assert daemon.client.get("/faults")["cores"] == []  # the failure is spent


def test_efa_status_and_clear_keep_counters(daemon) -> None:
    _fault(daemon.address, "efa", "--factor", "0.5")
    _fault(daemon.address, "slow", "--factor", "3", "--core", "1")
    _fault(daemon.address, "ecc", "--device", "0", "--type", "sram_ecc_uncorrected", "--count", "2")
    faults = daemon.client.get("/faults")
    assert faults["efa_bandwidth_factor"] == 0.5
    assert faults["cores"] == [
        {"core": 0, "slow_factor": 1.0, "nan": False, "hardware_error": "sram_ecc_uncorrected"},
        {"core": 1, "slow_factor": 3.0, "nan": False, "hardware_error": "sram_ecc_uncorrected"},
    ]
    status = run_tool(["neuron-emulator", "status"], daemon.address).stdout
    assert "EFA bandwidth x0.5" in status and "slow x3" in status and "next execution fails" in status
    # the existing ECC command still counts corrected events (no failure armed)
    corrected = _fault(daemon.address, "ecc", "--device", "0", "--type", "mem_ecc_corrected")
    assert corrected.stdout.splitlines() == ["neuron-emulator: device 0: mem_ecc_corrected = 1"]
    _fault(daemon.address, "clear")
    assert daemon.client.get("/faults") == {"efa_bandwidth_factor": 1.0, "cores": []}
    counters = daemon.client.get("/snapshot")["hardware_counters"][0]
    assert counters["sram_ecc_uncorrected"] == 2 and counters["mem_ecc_corrected"] == 1  # monotonic
    assert "faults:" not in run_tool(["neuron-emulator", "status"], daemon.address).stdout


@pytest.mark.parametrize(
    ("argv", "status", "message"),
    [
        (["slow", "--factor", "1"], 2, "slow needs a factor > 1"),
        (["slow", "--factor", "0.5"], 2, "slow needs a factor > 1"),
        (["slow"], 2, "slow needs --factor F"),
        (["slow", "--factor", "nan"], 2, "expected a finite number"),
        (["efa", "--factor", "1.5"], 2, "0 < F <= 1"),
        (["efa", "--factor", "2", "--core", "0"], 2, "whole node"),
        (["nan", "--factor", "2"], 2, "--factor applies to slow and efa"),
        (["ecc"], 2, "ecc needs --device N or --core C"),
        (["clear", "--type", "mem_ecc_corrected"], 2, "--type and --count apply to ecc"),
        (["bogus"], 2, "invalid choice"),
        (["slow", "--factor", "2", "--core", "7"], 1, "NeuronCore 7 does not exist (0-1)"),
        (["nan", "--device", "3"], 1, "neuron_device 3 does not exist"),
        (["ecc", "--device", "0", "--core", "5"], 1, "NeuronCore 5 does not exist"),
    ],
)
def test_bad_fault_arguments_are_one_line(daemon, argv: list[str], status: int, message: str) -> None:
    out = run_tool(["neuron-emulator", "fault", *argv], daemon.address)
    assert out.returncode == status, out.stderr
    assert one_clear_line(out.stderr) and message in out.stderr, out.stderr
    assert out.stdout == ""
    assert daemon.client.get("/faults") == {"efa_bandwidth_factor": 1.0, "cores": []}


@needs_root
def test_only_the_daemons_owner_may_inject_or_clear_faults(group_dir: Path) -> None:
    daemon = start_daemon(group_dir, extra=["--socket-group", grp.getgrgid(other_user()[1]).gr_name])
    try:
        answers = as_other_user(
            daemon.address,
            [
                ("GET", "/v1/faults", None),
                ("POST", "/v1/faults", {"kind": "slow", "factor": 2}),
                ("POST", "/v1/faults", {"kind": "ecc", "core": 0, "event_type": "mem_ecc_uncorrected"}),
                ("DELETE", "/v1/faults", None),
            ],
        )
        uid = other_user()[0]
        assert [status for status, _ in answers] == [200, 403, 403, 403], answers
        assert answers[1][1] == {"error": f"uid {uid} may not inject faults: only the daemon's owner or root may"}
        assert answers[3][1] == {"error": f"uid {uid} may not clear faults: only the daemon's owner or root may"}
        assert daemon.client.get("/faults") == {"efa_bandwidth_factor": 1.0, "cores": []}
        assert daemon.client.get("/snapshot")["hardware_counters"][0]["mem_ecc_uncorrected"] == 0
    finally:
        assert daemon.stop() == 0


def test_a_parallel_jobs_rank_slows_and_dies_of_an_uncorrectable_ecc_error(daemon, short_tmp: Path) -> None:
    env = tool_env(daemon.address, {"NEURON_COMPILE_CACHE_URL": str(short_tmp / "cache")})
    argv = [str(BIN / "neuron-emulator"), "run", "vit-base", "--micro-batch", "2", "--steps", "1000000"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        client = daemon.client
        assert wait_until(lambda: len(daemon.processes()) == 2, timeout=120)
        _fault(daemon.address, "slow", "--factor", "2", "--core", "1")

        def durations_now() -> tuple[set[float], set[float]]:
            """The distinct device times of each rank's executions of the last second (DP ranks: same graphs)."""
            since = client.get("/snapshot")["monotonic"] - 1.0
            snap = client.get(f"/snapshot?latencies_since={since!r}")
            return tuple(  # type: ignore[return-value]
                {float(lat[2]) for p in snap["processes"] if p["neuroncores"] == [core] for lat in p["latencies"]}
                for core in (0, 1)
            )

        # the rank on the slow core: every execution exactly twice as long as the other rank's same graph
        def twice() -> bool:
            normal, slow = durations_now()
            return len(normal) >= 2 and slow == {2 * d for d in normal}

        assert wait_until(twice, timeout=30), durations_now()

        out = _fault(daemon.address, "ecc", "--core", "1")
        assert "nc1: the next execution fails with NRT_EXEC_HW_ERR_HBM_UE" in out.stdout
        _, err = proc.communicate(timeout=60)
    finally:
        reap(proc)
    assert proc.returncode == 1, err
    # the cause, then its peer: rank 0 times out in its next collective (docs/multinode.md)
    cause, peers = err.strip().splitlines()
    assert "rank 1: NRT_EXEC_HW_ERR_HBM_UE" not in cause  # the status leads the line
    assert "NRT_EXEC_HW_ERR_HBM_UE: rank 1: step" in cause and "uncorrectable ECC error" in cause
    assert peers == (
        "neuron-emulator: error: node 0: 1 rank(s) (rank 0) stopped with NRT_TIMEOUT in their next collective"
    )
    assert wait_until(lambda: daemon.processes() == [], timeout=5)
    retired = client.get("/snapshot")["retired"]
    assert retired["errors"]["hardware"] == 1 and retired["executions"]["completed_with_err"] == 1
    assert retired["errors"]["runtime"] == 1 and retired["executions"]["timed_out"] == 1
    assert client.get("/faults") == {
        "efa_bandwidth_factor": 1.0,
        "cores": [{"core": 1, "slow_factor": 2.0, "nan": False, "hardware_error": None}],
    }


def _two_node_exec_job(daemon_address: str) -> None:
    """Two ranks of an ``exec`` job, each alone on its node (``LOCAL_WORLD_SIZE=1``), on cores 0
    and 1 of one daemon: every all-reduce of theirs spans the two nodes."""
    port = str(free_port())
    procs = [
        subprocess.Popen(
            [str(BIN / "neuron-emulator"), "exec", "--", sys.executable, str(HELPERS / "inter_node_all_reduce.py")],
            env=tool_env(
                daemon_address,
                {
                    "OMP_NUM_THREADS": "1",
                    "RANK": str(rank),
                    "LOCAL_RANK": "0",
                    "WORLD_SIZE": "2",
                    "LOCAL_WORLD_SIZE": "1",
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": port,
                    "NEURON_RT_VISIBLE_CORES": str(rank),
                },
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        for rank in (0, 1)
    ]
    for proc in procs:
        out, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0 and "sum 524288" in out, out[-3000:]


def test_efa_fault_slows_the_inter_node_all_reduce_of_an_exec_job(daemon) -> None:
    """``fault efa --factor 0.5``: each all-reduce of a two-node ``exec`` job takes twice as long
    (neuron_collective_seconds_total on EFA), as for a replayed job (docs/faults.md)."""

    def efa() -> dict[str, float]:
        assert wait_until(lambda: daemon.processes() == [], 10)
        return daemon.client.get("/snapshot")["retired"]["collectives"]["efa"]

    _two_node_exec_job(daemon.address)
    healthy = efa()
    assert healthy["operations"] == 2 * 3 and healthy["seconds"] > 0
    _fault(daemon.address, "efa", "--factor", "0.5")
    _two_node_exec_job(daemon.address)
    both = efa()
    assert both["operations"] == 2 * 2 * 3 and both["bytes"] == 2 * healthy["bytes"]  # the same work again
    assert both["seconds"] - healthy["seconds"] == pytest.approx(2 * healthy["seconds"])
