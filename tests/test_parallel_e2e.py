"""``neuron-emulator run MODEL --tp/--dp`` end to end on an emulated trn1.32xlarge: every rank a
process holding its own NeuronCore and its shard of HBM, busy at the planned rate, and gone after."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from emulator.hardware import get_instance_type
from emulator.parallel.launch import load_models
from emulator.parallel.runner import JobRequest, plan_request
from tests.support import BIN, reap, run_tool, tool_env, wait_until


def test_gpt3_tp8_dp4_fills_every_core_with_its_shard(daemon_factory, short_tmp: Path) -> None:
    daemon = daemon_factory("trn1.32xlarge")
    env = tool_env(daemon.address, {"NEURON_COMPILE_CACHE_URL": str(short_tmp / "cache")})
    # the graphs are in the persistent cache already (as neuron_parallel_compile leaves them), so
    # step 1 needs no simulated compile; the compile wait itself is exercised by the tests below
    plan = plan_request(
        JobRequest("gpt3-6.7b", tp=8, dp=4, micro_batch=1, seq_len=2048), get_instance_type("trn1.32xlarge")
    )
    assert load_models(plan, env)[1] > 0  # a cold cache: it compiled them
    assert load_models(plan, env)[1] == 0  # and holds them now
    argv = [str(BIN / "neuron-emulator"), "run", "gpt3-6.7b", "--tp", "8", "--dp", "4", "--steps", "3"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: len(daemon.processes()) == 32, timeout=120), proc.stderr
        procs = daemon.processes()
        cores = sorted(c for p in procs for c in p["neuroncores"])
        assert cores == list(range(32))  # one rank per core, each its own PID
        assert len({p["pid"] for p in procs}) == 32
        assert all(p["command"].split()[2:4] == ["emulator.parallel.replay", "gpt3-6.7b"] for p in procs)
        # the ranks report their executions once the (simulated) compile is over
        client = daemon.client

        def shard_reported() -> bool:
            mem = client.get(f"/processes/{procs[5]['pid']}/memory")["cores"]
            return next(iter(mem.values()))["constants"] > 0

        assert wait_until(shard_reported, timeout=60)
        core = next(iter(client.get(f"/processes/{procs[5]['pid']}/memory")["cores"].values()))
        # bf16 weights of one eighth of GPT3-6.7B (plus replicated parts) on this core, the rest elsewhere
        assert 1.6e9 < core["constants"] < 1.8e9
        assert core["peak"] < 16 * 2**30
        snap = client.get("/snapshot")
        busy = [float(c["busy"]) for p in snap["processes"] for c in p["cores"].values()]
        assert len(busy) == 32
        out, err = proc.communicate(timeout=120)
    finally:
        reap(proc)
    assert proc.returncode == 0, err
    assert "throughput" in out and "seq/s simulated" in out and "MFU" in out
    assert wait_until(lambda: daemon.processes() == [], timeout=2.0)


def test_gpt3_on_one_core_fails_with_nrt_resource_and_bad_layouts_are_one_line(daemon_factory, short_tmp) -> None:  # type: ignore[no-untyped-def]
    daemon = daemon_factory("trn1.32xlarge")
    started = time.monotonic()
    out = run_tool(["neuron-emulator", "run", "gpt3-6.7b", "--tp", "1", "--dp", "1"], daemon.address, timeout=120)
    assert out.returncode == 1
    assert "NRT_RESOURCE" in out.stderr and "Traceback" not in out.stderr
    assert time.monotonic() - started < 60
    for argv, text in (  # each check of the layout is unit-tested in test_parallel.py; here the CLI's lines
        (["llama2-13b", "--tp", "16", "--pp", "1"], "heads"),
        (["gpt-tiny", "--tp", "2"], "model-scale"),
        (["bert-large", "--nproc", "2"], "--nproc"),
    ):
        res = run_tool(["neuron-emulator", "run", *argv], daemon.address, timeout=120)
        assert res.returncode == 1, argv
        errors = [ln for ln in res.stderr.splitlines() if "error" in ln.lower()]
        assert len(errors) == 1 and text in errors[0], (argv, res.stderr)
    assert daemon.processes() == []


def _replay_ranks(address: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if "emulator.parallel.replay" in " ".join(proc.info["cmdline"] or []):
            try:
                if proc.environ().get("NEURON_EMULATOR_ADDR") == address:
                    found.append(proc)
            except psutil.Error:
                continue
    return found


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_ranks_die_with_their_launcher(daemon, short_tmp: Path, sig: signal.Signals) -> None:
    env = tool_env(daemon.address, {"NEURON_COMPILE_CACHE_URL": str(short_tmp / "cache")})
    argv = [str(BIN / "neuron-emulator"), "run", "vit-base", "--micro-batch", "2", "--steps", "1000000"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: len(daemon.processes()) == 2, timeout=120), proc.stderr
        assert len(_replay_ranks(daemon.address)) == 2
        killed = time.monotonic()
        proc.send_signal(sig)
        assert wait_until(lambda: _replay_ranks(daemon.address) == [], timeout=2.0)
        assert wait_until(lambda: daemon.processes() == [], timeout=1.0)  # the cores are free again
        assert time.monotonic() - killed < 3.0
        code = proc.wait(timeout=10)
        assert code == (-9 if sig == signal.SIGKILL else 128 + sig)
    finally:
        reap(proc)
