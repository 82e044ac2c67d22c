"""Every process ``neuron-emulator run`` starts stops with it (docs/lifecycle.md): a stop signal
(SIGTERM, SIGINT, SIGHUP) stops torchrun and every rank and returns 128 + the signal; ``kill -9``
of the launcher takes the ranks down through their parent-death signal; a rank whose peer died
or hangs fails with one clear line instead of waiting forever. Real daemon, real processes."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.lifecycle_support import Run, alive, all_gone, kill_all, ranks_attached, run_env, start_run
from tests.support import BIN, Daemon, free_port, wait_until


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    started: list[Run] = []
    yield started
    kill_all(started)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stop_signal_stops_torchrun_and_every_rank(daemon: Daemon, short_tmp: Path, runs, sig) -> None:  # type: ignore[no-untyped-def]
    run = start_run(runs, daemon, short_tmp, "mlp", "--nproc", "2", "--steps", "1000000")
    ranks = ranks_attached(daemon, run, 2)
    assert sorted(c for p in ranks for c in p["neuroncores"]) == [0, 1]
    lines = [" ".join(p.cmdline()) for p in run.seen]
    assert len([ln for ln in lines if "torchrun" in ln]) == 1
    assert len([ln for ln in lines if "torchrun" not in ln and "emulator.cli.worker" in ln]) == 2
    run.proc.send_signal(sig)
    assert run.proc.wait(timeout=15) == 128 + sig  # 143, 130, 129
    assert all_gone(run, timeout=3.0), [p.cmdline() for p in run.seen if alive(p)]
    assert wait_until(lambda: daemon.processes() == [], timeout=1.0)
    assert "Traceback" not in run.stderr()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stop_signal_stops_a_single_process_run(daemon: Daemon, short_tmp: Path, runs, sig) -> None:  # type: ignore[no-untyped-def]
    run = start_run(runs, daemon, short_tmp, "mlp", "--steps", "1000000")
    ranks_attached(daemon, run, 1)
    run.proc.send_signal(sig)
    assert run.proc.wait(timeout=15) == 128 + sig
    # it released its cores itself on the way out, no reaping needed
    assert daemon.processes() == []
    assert "Traceback" not in run.stderr()


def test_a_hang_up_stops_a_model_scale_job(daemon: Daemon, short_tmp: Path, runs) -> None:  # type: ignore[no-untyped-def]
    # SIGTERM, SIGINT and SIGKILL of a parallel job's launcher: tests/test_parallel_e2e.py
    run = start_run(runs, daemon, short_tmp, "vit-base", "--micro-batch", "2", "--steps", "1000000")
    assert wait_until(lambda: len(daemon.processes()) == 2, timeout=120, interval=0.2), run.stderr()
    run.descendants()
    run.proc.send_signal(signal.SIGHUP)
    assert run.proc.wait(timeout=15) == 128 + signal.SIGHUP
    assert all_gone(run, timeout=3.0)
    assert wait_until(lambda: daemon.processes() == [], timeout=1.0)


def test_kill_9_of_the_launcher_takes_torchrun_and_the_ranks_down(daemon: Daemon, short_tmp: Path, runs) -> None:  # type: ignore[no-untyped-def]
    run = start_run(runs, daemon, short_tmp, "mlp", "--nproc", "2", "--steps", "1000000")
    ranks = ranks_attached(daemon, run, 2)
    workers = [p for p in run.seen if p.pid in {r["pid"] for r in ranks}]
    assert len(workers) == 2
    run.proc.send_signal(signal.SIGKILL)  # no handler runs: only the parent-death signals act
    killed = time.monotonic()
    assert wait_until(lambda: not any(alive(p) for p in workers), timeout=2.0)
    assert wait_until(lambda: daemon.processes() == [], timeout=1.0)  # their cores are free again
    assert time.monotonic() - killed < 3.0
    assert all_gone(run, timeout=5.0), [p.cmdline() for p in run.seen if alive(p)]  # torchrun too
    assert run.proc.wait(timeout=5) == -signal.SIGKILL


def test_a_rank_killed_under_torchrun_ends_the_run_with_one_line(daemon: Daemon, short_tmp: Path, runs) -> None:  # type: ignore[no-untyped-def]
    run = start_run(runs, daemon, short_tmp, "mlp", "--nproc", "2", "--steps", "1000000")
    ranks = ranks_attached(daemon, run, 2)
    [victim] = [p["pid"] for p in ranks if p["tag"].endswith("rank1")]
    psutil.Process(victim).send_signal(signal.SIGKILL)
    assert run.proc.wait(timeout=15) == 1
    errors = [ln for ln in run.stderr().splitlines() if ln.startswith("neuron-emulator: error:")]
    assert f"neuron-emulator: error: rank 1 (pid {victim}) was killed by SIGKILL" in errors, run.stderr()
    assert "Traceback" not in run.stderr()
    assert all_gone(run, timeout=3.0)
    assert wait_until(lambda: daemon.processes() == [], timeout=1.0)


# -- a rank whose peer is gone: the two ranks started by hand, as torchrun would -------------------
def start_ranks(daemon: Daemon, tmp: Path, runs: list[Run], timeout_s: str) -> list[Run]:
    port = str(free_port())
    ranks = []
    for rank in range(2):
        env = run_env(
            daemon,
            tmp,
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE="2",
            LOCAL_WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            NEURON_EMULATOR_COLLECTIVE_TIMEOUT=timeout_s,
        )
        argv = [sys.executable, "-m", "emulator.cli.worker", "mlp", "--steps", "1000000"]
        ranks.append(Run(argv, env, tmp, name=f"rank{rank}"))
    runs.extend(ranks)
    procs = [r.proc.pid for r in ranks]
    for r in ranks:
        ranks_attached_pid(daemon, r, procs)
    return ranks


def ranks_attached_pid(daemon: Daemon, run: Run, pids: list[int]) -> None:
    def stepping() -> bool:
        if run.proc.poll() is not None:
            raise AssertionError(f"rank exited {run.proc.returncode}: {run.stderr()}")
        snap = daemon.client.get("/snapshot")
        mine = [p for p in snap["processes"] if p["pid"] == run.proc.pid]
        return bool(mine) and sum(mine[0]["executions"].values()) > 2

    assert wait_until(stepping, timeout=120, interval=0.2), run.stderr()


def one_error_line(stderr: str) -> str:
    errors = [ln for ln in stderr.splitlines() if ln.startswith("neuron-emulator: error:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    return errors[0]


def test_a_rank_whose_peer_was_killed_fails_at_once_with_one_line(daemon: Daemon, short_tmp: Path, runs) -> None:  # type: ignore[no-untyped-def]
    survivor, victim = start_ranks(daemon, short_tmp, runs, timeout_s="20")
    victim.proc.send_signal(signal.SIGKILL)
    started = time.monotonic()
    assert survivor.proc.wait(timeout=20) == 1
    assert time.monotonic() - started < 10  # the peer's sockets closed: no need to wait for the timeout
    line = one_error_line(survivor.stderr())
    assert re.fullmatch(
        r"neuron-emulator: error: NRT_FAILURE: rank 0: the gradient all-reduce failed: a peer rank is gone "
        r"\(gloo: .+\)",
        line,
    ), line
    assert wait_until(lambda: daemon.processes() == [], timeout=1.0)


def test_a_rank_whose_peer_hangs_gives_up_after_the_collective_timeout(daemon: Daemon, short_tmp: Path, runs) -> None:  # type: ignore[no-untyped-def]
    survivor, stuck = start_ranks(daemon, short_tmp, runs, timeout_s="3")
    stuck.proc.send_signal(signal.SIGSTOP)  # alive, sockets open, never answers
    try:
        started = time.monotonic()
        assert survivor.proc.wait(timeout=20) == 1
        waited = time.monotonic() - started
        assert 2.0 < waited < 3.0 + 6.0  # its next all-reduce waited the timeout (3 s), no longer
        line = one_error_line(survivor.stderr())
        assert line.startswith("neuron-emulator: error: NRT_TIMEOUT: rank 0: the gradient all-reduce got no answer")
        assert "within 3 s (NEURON_EMULATOR_COLLECTIVE_TIMEOUT)" in line
    finally:
        stuck.proc.kill()
        stuck.proc.wait(timeout=15)


def test_a_bad_collective_timeout_is_one_line(daemon: Daemon, short_tmp: Path) -> None:
    out = subprocess.run(
        [str(BIN / "neuron-emulator"), "run", "mlp", "--nproc", "2"],
        env=run_env(daemon, short_tmp, NEURON_EMULATOR_COLLECTIVE_TIMEOUT="soon"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "neuron-emulator: error: NEURON_EMULATOR_COLLECTIVE_TIMEOUT='soon': expected a positive number of seconds, "
        "like 60 or 2.5"
    ]
    assert daemon.processes() == []


def test_torchrun_failure_report_names_the_rank_a_signal_killed() -> None:
    from emulator.workloads.launch import killed_ranks

    report = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
======================================================
emulator.cli.worker FAILED
------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-23_11:23:14
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 7898)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 7898
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-23_11:23:14
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 7899)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 7899
======================================================""".splitlines()
    # rank 0 was stopped by torchrun itself once rank 1 died: only the root cause is named
    assert killed_ranks(report) == [(1, 7899, signal.SIGKILL)]
    assert killed_ranks([ln.replace("-9 (pid", "1 (pid") for ln in report]) == []  # an exit status, not a signal


def test_gloo_errors_become_one_runtime_line() -> None:
    from emulator.runtime.collectives import collective_error, collective_timeout

    closed = RuntimeError(
        "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
        "[127.0.0.1]:23949. This is typically caused by a remote worker crashing. Check the logs of the remote worker"
    )
    err = collective_error(closed, "the gradient all-reduce", rank=1, timeout=60)
    assert str(err) == (
        "NRT_FAILURE: rank 1: the gradient all-reduce failed: a peer rank is gone "
        "(gloo: Connection closed by peer [127.0.0.1]:23949)"
    )
    slow = RuntimeError(
        "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 5000ms for recv operation"
    )
    err = collective_error(slow, "the gradient all-reduce", rank=0, timeout=5)
    assert err.status == "NRT_TIMEOUT" and "within 5 s (NEURON_EMULATOR_COLLECTIVE_TIMEOUT)" in str(err)
    assert collective_timeout({}) == 60.0 and collective_timeout({"NEURON_EMULATOR_COLLECTIVE_TIMEOUT": "2.5"}) == 2.5
    for bad in ("0", "-1", "nan", "inf", "soon"):
        with pytest.raises(ValueError, match="expected a positive number of seconds"):
            collective_timeout({"NEURON_EMULATOR_COLLECTIVE_TIMEOUT": bad})
