"""Helpers for tests of whole runs: a ``neuron-emulator run`` (or any command) with its output in
files, every process it started tracked with psutil and killed when the test ends."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import psutil

from tests.support import BIN, Daemon, tool_env, wait_until


class Run:
    """A ``neuron-emulator run`` (or any command) with its output in files, and its descendants."""

    def __init__(self, argv: list[str], env: dict[str, str], tmp: Path, name: str = "run") -> None:
        self.out = tmp / f"{name}-{time.monotonic_ns()}.out"
        self.err = self.out.with_suffix(".err")
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        self.seen: list[psutil.Process] = []

    def descendants(self) -> list[psutil.Process]:
        try:
            found = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            found = []
        self.seen += [p for p in found if p.pid not in {s.pid for s in self.seen}]
        return found

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    def kill_everything(self) -> None:
        """Test cleanup: nothing this run started may outlive the test."""
        self.descendants()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=15)
        for p in self.seen:
            if alive(p):
                p.kill()


def alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def run_env(daemon: Daemon, tmp: Path, **extra: str) -> dict[str, str]:
    return tool_env(daemon.address, {"NEURON_COMPILE_CACHE_URL": str(tmp / "cache"), **extra})


def kill_all(runs: list[Run]) -> None:
    """Test cleanup (the ``runs`` fixtures): nothing a run started may outlive the test."""
    for run in runs:
        run.kill_everything()


def start_run(runs: list[Run], daemon: Daemon, tmp: Path, *argv: str, **env: str) -> Run:
    run = Run([str(BIN / "neuron-emulator"), "run", *argv], run_env(daemon, tmp, **env), tmp)
    runs.append(run)
    return run


def ranks_attached(daemon: Daemon, run: Run, n: int, timeout: float = 120) -> list[dict]:
    """Wait until ``n`` processes of the run hold cores and have executed a step; return them."""

    def ready() -> bool:
        if run.proc.poll() is not None:
            raise AssertionError(f"the run exited {run.proc.returncode}: {run.stderr()}")
        procs = daemon.processes()
        if len(procs) != n:
            return False
        snap = daemon.client.get("/snapshot")
        return all(sum(p["executions"].values()) > 0 for p in snap["processes"] if p["pid"] != 0)

    assert wait_until(ready, timeout=timeout, interval=0.2), run.stderr()
    run.descendants()
    return daemon.processes()


def all_gone(run: Run, timeout: float) -> bool:
    return wait_until(lambda: not any(alive(p) for p in run.seen), timeout=timeout, interval=0.05)
