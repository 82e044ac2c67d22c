"""Real training processes on emulated NeuronCores: what the daemon counts follows from the work.

Uses tests/helpers/train_loop.py (an MLP W -> 4W -> 1 trained with SGD+momentum), whose FLOPs per
step PyTorch counts as 16*B*W^2 + 24*B*W (forward addmm x2, backward mm x3; the input needs no
gradient), and whose parameters take 4*(W*4W + 4W + 4W + 1) bytes.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from neurontools.sources.daemon_client import DaemonClient
from tests.support import HELPERS, start_holder, tool_env, wait_until


def mlp_flops(batch: int, width: int) -> int:
    return 16 * batch * width * width + 24 * batch * width


def mlp_param_bytes(width: int) -> int:
    return 4 * (width * 4 * width + 4 * width + 4 * width + 1)


def train(address: str, cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120):
    script = cwd / "train_loop.py"
    script.write_text((HELPERS / "train_loop.py").read_text())
    extra = {"NEURON_COMPILE_CACHE_URL": str(cwd / "neuron-compile-cache"), **(env or {})}
    return subprocess.Popen(
        [sys.executable, str(script), *args],
        cwd=cwd,
        env=tool_env(address, extra),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def lines(proc: subprocess.Popen[str], timeout: float = 120) -> list[dict]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return [json.loads(line) for line in out.splitlines()]


def read_until_done(proc: subprocess.Popen[str]) -> list[dict]:
    """Steps of a --hold run (it keeps its cores after printing 'done')."""
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(json.loads(line))
        if seen[-1].get("done"):
            return seen
    raise AssertionError(proc.stderr.read() if proc.stderr else "no output")


def snapshot(address: str) -> dict:
    return DaemonClient(_addr(address)).get("/snapshot")


def _addr(address: str):
    from neurontools.sources.address import parse_address

    return parse_address(address)


def entry(snap: dict, pid: int) -> dict:
    [proc] = [p for p in snap["processes"] if p["pid"] == pid]
    return proc


def test_busy_flops_and_memory_follow_the_work_on_the_claimed_core_only(daemon_factory, short_tmp: Path) -> None:
    daemon = daemon_factory("trn1.32xlarge")
    steps, batch, width = 12, 32, 64
    proc = train(
        daemon.address,
        short_tmp,
        "--steps",
        str(steps),
        "--width",
        str(width),
        "--hold",
        env={"NEURON_RT_VISIBLE_CORES": "5"},
    )
    try:
        out = read_until_done(proc)
        per_step = [s for s in out if "step" in s]
        assert all(s["flops"] == mlp_flops(batch, width) for s in per_step)
        snap = snapshot(daemon.address)
        me = entry(snap, proc.pid)
        assert me["neuroncores"] == [5] and list(me["cores"]) == ["5"]
        core = me["cores"]["5"]
        # every step executed has been counted, all of its FLOPs and simulated time
        assert core["flops"] == steps * mlp_flops(batch, width)
        assert core["busy"] == pytest.approx(sum(s["device_seconds"] for s in per_step), rel=1e-6)
        assert 0 < max(core["engines"].values()) <= core["busy"] + 1e-12
        assert me["executions"]["completed"] == steps
        assert sum(me["executions"].values()) == steps
        # two graphs: the first step also creates SGD's momentum buffers, later steps update them
        assert me["compile_cache"] == {"hits": steps - 2, "misses": 2}
        assert [s["compiled"] for s in per_step] == [True, True] + [False] * (steps - 2)
        assert len(me["latencies"]) == steps
        assert all(total >= device for _, total, device in me["latencies"])
        # memory: parameters are constants; gradients + momentum (2x params) are tensors
        mem = me["memory"]["cores"]["5"]
        assert mem["constants"] == mlp_param_bytes(width)
        assert mem["tensors"] >= 2 * mlp_param_bytes(width)
        assert mem["model_code"] >= 96_000_000  # the runtime's micro-code overhead + the NEFF
        assert mem["runtime_memory"] > 0
        assert me["loaded_models"][0]["model_id"] == 10001
        assert me["cpu"]["user"] > 0  # the real process's CPU time
        # idle now: the counters stand still
        before = snapshot(daemon.address)
        time.sleep(0.3)
        after = snapshot(daemon.address)
        assert entry(after, proc.pid)["cores"]["5"] == entry(before, proc.pid)["cores"]["5"]
    finally:
        proc.kill()
        proc.wait()
    assert wait_until(lambda: snapshot(daemon.address)["processes"] == [], timeout=1.0)


def test_loss_falls_on_real_math(daemon, short_tmp: Path) -> None:
    out = lines(train(daemon.address, short_tmp, "--steps", "30", "--lr", "0.01"))
    losses = [s["loss"] for s in out if "step" in s]
    assert losses[-1] < 0.5 * losses[0]
    assert all(s["outcome"] == "completed" for s in out if "step" in s)


def test_divergence_is_counted_as_numerical_errors(daemon, short_tmp: Path) -> None:
    proc = train(daemon.address, short_tmp, "--steps", "12", "--lr", "1e6", "--hold")
    try:
        out = read_until_done(proc)
        outcomes = [s["outcome"] for s in out if "step" in s]
        assert "completed_with_num_err" in outcomes
        me = entry(snapshot(daemon.address), proc.pid)
        bad = outcomes.count("completed_with_num_err")
        assert me["executions"]["completed_with_num_err"] == bad
        assert me["errors"]["numerical"] == bad
        assert me["executions"]["completed"] == len(outcomes) - bad
    finally:
        proc.kill()
        proc.wait()


def test_new_shapes_recompile_and_the_persistent_cache_is_reused(daemon, short_tmp: Path) -> None:
    first = [s for s in lines(train(daemon.address, short_tmp, "--steps", "6", "--shapes")) if "step" in s]
    # step 0: batch B creating momentum buffers; step 1: batch 2B; step 2: batch B with momentum;
    # then both shapes hit the cache
    assert [s["compiled"] for s in first] == [True, True, True, False, False, False]
    assert first[0]["flops"] * 2 == first[1]["flops"]  # twice the batch, twice the FLOPs
    # a new run finds both graphs in the on-disk cache: no compile time at all
    second = [s for s in lines(train(daemon.address, short_tmp, "--steps", "4", "--shapes")) if "step" in s]
    assert not any(s["compiled"] for s in second) and all(s["cache_hit"] for s in second)
    assert any((short_tmp / "neuron-compile-cache").glob("neuronxcc-*/MODULE_*/model.done"))


def test_out_of_memory_fails_the_process_only(daemon, short_tmp: Path, holders) -> None:
    other = start_holder(daemon.address, short_tmp, {"NEURON_RT_VISIBLE_CORES": "1"})
    holders.append(other)
    # 40000 x 160000 fp32 weights = 23.8 GiB > 16 GiB of one NeuronCore
    proc = train(
        daemon.address, short_tmp, "--meta", "--width", "40000", "--steps", "1", env={"NEURON_RT_VISIBLE_CORES": "0"}
    )
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert "NRT_RESOURCE: Failed to allocate 23.842GB (alignment: none, usage: tensors) on ND 0:NC 0" in err
    assert 'nrt_tensor_allocate status=4 message="Allocation Failure"' in err
    assert "capacity 16.000GB" in err
    # the daemon and the other process keep running; core 0 is free again
    assert daemon.answers() and other.proc.poll() is None
    assert wait_until(lambda: [p["pid"] for p in daemon.processes()] == [other.pid], timeout=1.0)


def test_model_scale_step_counts_flops_without_arithmetic(daemon, short_tmp: Path) -> None:
    out = [
        s
        for s in lines(train(daemon.address, short_tmp, "--meta", "--width", "2048", "--batch", "256", "--steps", "3"))
        if "step" in s
    ]
    assert all(s["loss"] is None for s in out)
    assert all(s["flops"] == mlp_flops(256, 2048) for s in out)
    # big bf16-free fp32 matmuls: the modelled time is at least the FLOPs at the FP32 peak
    assert all(s["device_seconds"] >= s["flops"] / 23.75e12 for s in out)


def test_process_killed_mid_step_releases_everything(daemon_factory, short_tmp: Path) -> None:
    daemon = daemon_factory("trn1.2xlarge")
    # model-scale FP32 steps long enough (several tenths of a second each) to be killed inside one
    proc = train(daemon.address, short_tmp, "--meta", "--width", "8192", "--batch", "8192", "--steps", "50")
    assert proc.stdout is not None
    json.loads(proc.stdout.readline())  # one step done: the next one is executing
    before = entry(snapshot(daemon.address), proc.pid)
    proc.send_signal(signal.SIGKILL)
    assert wait_until(lambda: snapshot(daemon.address)["processes"] == [], timeout=1.0)
    assert before["executions"]["completed"] >= 1
    again = start_holder(daemon.address, short_tmp)
    assert again.attached and again.cores == [0, 1]
    again.release()
    proc.wait()


def test_xla_use_bf16_trains_in_bf16_and_runs_faster(daemon, short_tmp: Path) -> None:
    args = ("--steps", "8", "--width", "512", "--batch", "256", "--lr", "0.001")
    fp32 = [s for s in lines(train(daemon.address, short_tmp, *args)) if "step" in s]
    bf16 = [s for s in lines(train(daemon.address, short_tmp, *args, env={"XLA_USE_BF16": "1"})) if "step" in s]
    assert bf16[-1]["loss"] < bf16[0]["loss"]  # still learns, with real BF16 values
    assert bf16[-1]["loss"] != fp32[-1]["loss"]  # different arithmetic
    assert [s["flops"] for s in bf16] == [s["flops"] for s in fp32]  # same work
    assert bf16[-1]["device_seconds"] < fp32[-1]["device_seconds"]  # at the BF16 rate
