"""A training process outlives a daemon restart (docs/lifecycle.md): while no daemon runs it keeps
training and says so once; a daemon started again on the same socket learns within a second or
two the same PID, cores, loaded models and HBM (and its counters start from zero); a core given
away meanwhile fails the process with the runtime's error. Real daemons, real training processes."""

from __future__ import annotations

import json
import re
import signal
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.lifecycle_support import Run, kill_all, ranks_attached, start_run
from tests.support import (
    BIN,
    PROMETHEUS,
    Daemon,
    Holder,
    free_port,
    prometheus_argv,
    start_holder,
    tool_env,
    wait_until,
)

WARN = " WARN   NRT:nrt_heartbeat no Neuron emulator daemon answers at "
AGAIN = " INFO   NRT:nrt_heartbeat registered again with the daemon at "
REREGISTER_S = 2.0  # issue 10: a restart is invisible to neuron-ls within 2 s (heartbeat 1 s, 0.25 s while absent)


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    started: list[Run] = []
    yield started
    kill_all(started)


def memory_of(daemon: Daemon, pid: int) -> dict[str, dict[str, int]]:
    return daemon.client.get(f"/processes/{pid}/memory")["cores"]


def entry(daemon: Daemon, pid: int) -> dict:
    [proc] = [p for p in daemon.client.get("/snapshot")["processes"] if p["pid"] == pid]
    return proc


def last_step(run: Run) -> int:
    steps = re.findall(r"^step +(\d+)/", run.stdout(), re.M)
    return int(steps[-1]) if steps else 0


DaemonFactory = Callable[..., Daemon]  # conftest's daemon_factory


class Trainer(NamedTuple):
    daemon: Daemon
    run: Run
    proc: dict  # its entry in the daemon's process list


@pytest.fixture
def trainer(daemon_factory: DaemonFactory, short_tmp: Path, runs: list[Run]) -> Trainer:
    """A trn1.2xlarge daemon and an mlp trainer on its core 0 that trains until stopped, attached."""
    daemon = daemon_factory("trn1.2xlarge")
    run = start_run(runs, daemon, short_tmp, "mlp", "--cores", "0", "--steps", "1000000")
    [proc] = ranks_attached(daemon, run, 1)
    return Trainer(daemon, run, proc)


def restart(daemon_factory: DaemonFactory, daemon: Daemon, down_seconds: float = 0.0) -> tuple[Daemon, float]:
    """Stop the daemon, wait, start a new one on the same socket; (it, when it answered)."""
    daemon.stop()
    time.sleep(down_seconds)
    again = daemon_factory(daemon.instance_type, address=daemon.address)
    return again, time.monotonic()


def test_a_training_process_registers_again_with_a_restarted_daemon(
    trainer: Trainer, daemon_factory: DaemonFactory, short_tmp: Path, holders: list[Holder]
) -> None:
    daemon, run, proc = trainer
    pid = proc["pid"]
    # mlp's graphs are two (step 1 also creates the optimizer state): both loaded after step 3
    assert wait_until(lambda: entry(daemon, pid)["executions"]["completed"] >= 3, timeout=30)
    before = memory_of(daemon, pid)["0"]
    models = entry(daemon, pid)["loaded_models"]
    assert len(models) == 2 and entry(daemon, pid)["compile_cache"]["misses"] == 2

    # no daemon for a while: training goes on, and the process says so once
    daemon.stop()
    assert wait_until(lambda: WARN in run.stderr(), timeout=REREGISTER_S), run.stderr()
    step = last_step(run)
    assert wait_until(lambda: last_step(run) > step, timeout=20), run.stdout()
    time.sleep(2.0)  # two more heartbeats without a daemon
    assert run.stderr().count(WARN) == 1

    again = daemon_factory("trn1.2xlarge", address=daemon.address)
    answered = time.monotonic()
    assert wait_until(lambda: any(p["pid"] == pid for p in again.processes()), timeout=REREGISTER_S)
    assert time.monotonic() - answered < REREGISTER_S
    [back] = again.processes()
    assert (back["pid"], back["neuroncores"], back["command"], back["tag"]) == (
        pid,
        [0],
        proc["command"],
        proc["tag"],
    )
    # the HBM ledger and loaded models it holds, told at registration
    now = memory_of(again, pid)["0"]
    assert now["constants"] == before["constants"] > 0 and now["model_code"] == before["model_code"]
    assert now["peak"] >= before["peak"]
    assert [m["model_id"] for m in entry(again, pid)["loaded_models"]] == [m["model_id"] for m in models]
    # a new daemon's counters start from zero: the graphs were compiled before it started (a report
    # already on its way when the process registered again may still carry the old counts: the
    # process's next report, sent after the registration, carries the counts from zero)
    assert wait_until(lambda: entry(again, pid)["executions"]["completed"] > 1, timeout=10)
    assert entry(again, pid)["compile_cache"]["misses"] == 0

    # its core cannot be claimed by another process
    other = start_holder(again.address, short_tmp, {"NEURON_RT_VISIBLE_CORES": "0"})
    holders.append(other)
    assert not other.attached
    assert "NRT_EXEC_NC_BUSY" in other.stderr and f"held by PID {pid}" in other.stderr

    err = run.stderr()
    assert err.count(WARN) == 1 and err.count(AGAIN) == 1 and "Traceback" not in err
    run.proc.send_signal(signal.SIGTERM)
    assert run.proc.wait(timeout=15) == 128 + signal.SIGTERM
    assert again.processes() == []


def test_a_core_given_away_while_the_daemon_was_down_fails_the_process(
    trainer: Trainer, daemon_factory: DaemonFactory, short_tmp: Path, holders: list[Holder]
) -> None:
    daemon, run, proc = trainer
    # hold the trainer still so that another process takes its core first
    run.proc.send_signal(signal.SIGSTOP)
    try:
        again, _ = restart(daemon_factory, daemon)
        taker = start_holder(again.address, short_tmp, {"NEURON_RT_VISIBLE_CORES": "0"})
        holders.append(taker)
        assert taker.attached and taker.cores == [0]
    finally:
        run.proc.send_signal(signal.SIGCONT)
    assert run.proc.wait(timeout=REREGISTER_S + 5) == 1
    err = run.stderr()
    nrt = [ln for ln in err.splitlines() if " ERROR  NRT:" in ln]
    assert len(nrt) == 1 and f"nc0 held by PID {taker.pid}" in nrt[0], err
    errors = [ln for ln in err.splitlines() if ln.startswith("neuron-emulator: error:")]
    assert len(errors) == 1 and errors[0].startswith("neuron-emulator: error: NRT_EXEC_NC_BUSY: "), err
    assert "could not register them again" in errors[0] and "Traceback" not in err
    assert [p["pid"] for p in again.processes()] == [taker.pid]  # the taker keeps the core
    assert proc["pid"] == run.proc.pid


def test_model_scale_ranks_register_again_with_a_restarted_daemon(daemon_factory, short_tmp: Path, runs) -> None:  # type: ignore[no-untyped-def]
    daemon = daemon_factory("trn1.2xlarge")
    run = start_run(runs, daemon, short_tmp, "vit-base", "--micro-batch", "2", "--steps", "100000")
    assert wait_until(lambda: len(daemon.processes()) == 2, timeout=120, interval=0.2), run.stderr()
    ranks = {p["pid"]: p["neuroncores"] for p in daemon.processes()}

    def shards_reported(d: Daemon) -> bool:
        return all(memory_of(d, pid)[str(cores[0])]["constants"] > 0 for pid, cores in ranks.items())

    assert wait_until(lambda: shards_reported(daemon), timeout=60), run.stderr()
    before = {pid: memory_of(daemon, pid) for pid in ranks}
    again, answered = restart(daemon_factory, daemon)
    assert wait_until(lambda: {p["pid"] for p in again.processes()} == set(ranks), timeout=REREGISTER_S)
    assert time.monotonic() - answered < REREGISTER_S
    assert {p["pid"]: p["neuroncores"] for p in again.processes()} == ranks
    assert {pid: memory_of(again, pid) for pid in ranks} == before  # the shard's HBM, told at registration
    assert all(entry(again, pid)["loaded_models"] for pid in ranks)
    assert run.proc.poll() is None  # the job goes on
    run.proc.send_signal(signal.SIGTERM)
    assert run.proc.wait(timeout=15) == 128 + signal.SIGTERM
    assert wait_until(lambda: again.processes() == [], timeout=2.0)


# -- neuron-exporter's counters across the restart, as a real Prometheus sees them ---------------


def prom_get(port: int, path: str, **params: object) -> dict:
    url = f"http://127.0.0.1:{port}/api/v1/{path}?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return body["data"]


def prom_values(port: int, expr: str, start: float, end: float) -> list[float]:
    """Every value of ``expr`` from ``start`` to ``end`` (one per second; one series expected)."""
    result = prom_get(port, "query_range", query=expr, start=start, end=end, step=1)["result"]
    assert len(result) == 1, (expr, result)
    return [float(v) for _, v in result[0]["values"]]


def prom_now(port: int, expr: str) -> float | None:
    result = prom_get(port, "query", query=expr)["result"]
    return float(result[0]["value"][1]) if result else None


@pytest.mark.skipif(PROMETHEUS is None, reason="Debian package 'prometheus' not installed")
def test_exporter_counters_across_a_daemon_restart_in_prometheus(
    trainer: Trainer, daemon_factory: DaemonFactory, short_tmp: Path, runs: list[Run]
) -> None:
    daemon, _, proc = trainer
    pid = proc["pid"]
    exporter_port, prom_port = free_port(), free_port()
    exporter = [str(BIN / "neuron-exporter"), "--port", str(exporter_port), "--interval", "1", "--per-process"]
    runs.append(Run(exporter, tool_env(daemon.address), short_tmp, name="exporter"))
    config = short_tmp / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: neuron-exporter\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{exporter_port}']}}]\n"
    )
    prometheus = prometheus_argv(config, short_tmp / "tsdb", prom_port)
    runs.append(Run(prometheus, tool_env(None), short_tmp, name="prometheus"))
    executions = 'rate(neuron_executions_total{outcome="completed"}[5s])'
    busy = f'neuron_process_neuroncore_busy_seconds_total{{pid="{pid}",neuroncore="0"}}'

    def counting() -> bool:
        try:
            return (prom_now(prom_port, executions) or 0) > 0 and (prom_now(prom_port, f"rate({busy}[5s])") or 0) > 0
        except OSError:  # Prometheus not listening yet
            return False

    assert wait_until(counting, timeout=60, interval=0.5), runs[-1].stderr()
    start = time.time()
    time.sleep(6)
    counted_before = entry(daemon, pid)["executions"]["completed"]
    again, _ = restart(daemon_factory, daemon, down_seconds=2.0)
    assert wait_until(lambda: any(p["pid"] == pid for p in again.processes()), timeout=REREGISTER_S)
    assert wait_until(lambda: (prom_now(prom_port, executions) or 0) > 0, timeout=30, interval=0.5)
    time.sleep(6)
    end = time.time()
    counted_after = entry(again, pid)["executions"]["completed"]

    # the process's own counter restarted from zero in the new daemon: one reset of the same series
    assert prom_now(prom_port, f"resets({busy}[{int(end - start) + 5}s])") >= 1
    busy_rate = prom_values(prom_port, f"rate({busy}[5s])", start, end)
    assert all(0 <= v <= 1.0 for v in busy_rate), busy_rate  # a core is busy at most all the time
    # the node counter never goes backwards: its rate stays sensible across the restart
    assert prom_now(prom_port, f'resets(neuron_executions_total{{outcome="completed"}}[{int(end - start) + 5}s])') == 0
    rates = prom_values(prom_port, executions, start, end)
    assert all(v >= 0 for v in rates), rates
    assert rates[-1] > 0  # counting again
    # no jump: the node counter holds what the old daemon counted plus what the new one counted
    # (at most a few more executions reached the old daemon after the count read before its stop)
    total = prom_values(prom_port, 'neuron_executions_total{outcome="completed"}', end - 1, end)[-1]
    assert counted_before < total <= counted_before + counted_after + 10, (counted_before, counted_after, total)


def test_hbm_peak_sampling_survives_a_daemon_outage() -> None:
    """The run's peak-HBM figure keeps sampling after the daemon was away (or did not know us yet)."""
    from types import SimpleNamespace

    from emulator.workloads.hbm import HbmPeak
    from neurontools.sources.address import DaemonAddress
    from neurontools.sources.daemon_client import DaemonError, DaemonUnavailable

    def answers() -> Iterator[object]:
        yield {"cores": {"0": {"constants": 10, "tensors": 5}}}
        yield DaemonUnavailable(DaemonAddress(socket_path="/tmp/x.sock"), "socket does not exist")
        yield DaemonError(404, {"error": "process 1 is not attached"})
        yield {"cores": {"0": {"constants": 10, "tensors": 9}}}
        yield DaemonError(403, {"error": "not yours"})

    script = answers()

    def get(path: str) -> object:
        answer = next(script)
        if isinstance(answer, Exception):
            raise answer
        return answer

    peak = HbmPeak(SimpleNamespace(get=get), pid=1)  # type: ignore[arg-type]
    for _ in range(4):
        peak.sample()
    assert peak.peak() == {0: 19}
    peak.sample()  # any other refusal: no figure rather than a wrong one
    assert peak.peak() is None and "not yours" in peak.reason


def test_resume_state_must_be_on_the_cores_registered(daemon: Daemon) -> None:
    """The daemon takes what a process says it holds only for cores it holds."""
    import os

    from neurontools.sources.daemon_client import DaemonError

    memory = {"constants": 1, "model_code": 2, "model_shared_scratchpad": 0, "runtime_memory": 3, "tensors": 4}
    body = {"pid": os.getpid(), "command": "pytest", "kind": "runtime", "visible_cores": [0]}
    stray = {"cores": [{"core": 1, "memory": memory, "peak": 10}], "models": []}
    with pytest.raises(DaemonError) as refused:
        daemon.client.post("/processes", {**body, "resume": stray})
    assert refused.value.status == 400 and "does not own NeuronCore 1" in str(refused.value)
    assert daemon.processes() == []  # nothing half-registered
    model = {"core": 0, "model_id": 10001, "uuid": "u" * 32, "name": "m", "code_bytes": 2}
    resume = {"cores": [{"core": 0, "memory": memory, "peak": 10}], "models": [model]}
    daemon.client.post("/processes", {**body, "resume": resume})
    try:
        assert memory_of(daemon, os.getpid())["0"] == {**memory, "peak": 10}
        [loaded] = entry(daemon, os.getpid())["loaded_models"]
        assert loaded["model_id"] == 10001 and loaded["subgraphs"]["sg_00"]["memory_used_bytes"]["neuron_device"] == 2
        assert entry(daemon, os.getpid())["executions"]["completed"] == 0
    finally:
        daemon.client.delete(f"/processes/{os.getpid()}")
