"""The benchmarks' load: an emulated trn1.32xlarge and a real model-scale training job on it.

Not a benchmark of its own; ``pace.py``, ``exporter_scrape.py`` and ``top_cpu.py`` import it, and
``soak.py`` its frame (``run_benchmark``: a ``Run``, signals, exit statuses).

``Run`` owns a temporary directory (daemon socket, compile cache, logs), the daemon
(``neuron-emulator up --instance-type trn1.32xlarge --socket <tmp>`` in the foreground, in a
session of its own), at most one job (``neuron-emulator run MODEL ...``: the launcher traces the
step once, then starts one torch-free rank process per NeuronCore) and any other processes a
benchmark starts (``run.peers``). ``Run.close()`` stops all of them, process group by process
group, and removes the directory; it ignores a second Ctrl-C while it does so.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

from neurontools.sources.address import parse_address
from neurontools.sources.daemon_client import DaemonClient, DaemonError, DaemonUnavailable

BIN = Path(sys.executable).parent
INSTANCE_TYPE = "trn1.32xlarge"
CORES = 32
RANK_MODULE = "emulator.parallel.replay"
ATTACH_TIMEOUT = 240.0  # tracing a 7B model on meta takes 10-20 s on 2 busy vCPUs; 32 rank starts a few more
FIRST_EXECUTION_MARGIN = 60.0  # beyond the simulated compile wait


class Interrupted(Exception):
    """SIGTERM arrived."""


class BenchError(Exception):
    """The benchmark cannot go on; the message says why."""


def raise_interrupted(signum: int, frame: object) -> None:
    """A SIGTERM handler: unwind through the ``finally`` blocks like Ctrl-C does."""
    raise Interrupted


def handle_signals() -> None:
    """SIGTERM unwinds like Ctrl-C; Ctrl-C raises KeyboardInterrupt even when the shell started
    us with SIGINT ignored (a background job of a non-interactive shell)."""
    signal.signal(signal.SIGTERM, raise_interrupted)
    signal.signal(signal.SIGINT, signal.default_int_handler)


@dataclass(frozen=True)
class Job:
    """A published Trn1 training configuration, as ``neuron-emulator run`` / ``bench`` flags."""

    key: str
    title: str
    model: str
    flags: tuple[str, ...]

    def run_argv(self, steps: int) -> list[str]:
        return [str(BIN / "neuron-emulator"), "run", self.model, *self.flags, "--steps", str(steps)]

    def bench_argv(self) -> list[str]:
        return [str(BIN / "neuron-emulator"), "bench", self.model, *self.flags, "--json"]

    @property
    def command(self) -> str:
        return " ".join(["neuron-emulator run", self.model, *self.flags])


JOBS: dict[str, Job] = {
    job.key: job
    for job in (
        Job(
            "bert-large-dp32",
            "BERT-Large Ph1 DP32",
            "bert-large",
            ("--dp", "32", "--micro-batch", "16", "--global-batch", "16384", "--seq-len", "128"),
        ),
        Job("gpt3-6.7b-tp8dp4", "GPT3-6.7B TP8xDP4", "gpt3-6.7b", ("--tp", "8", "--dp", "4", "--global-batch", "64")),
    )
}


# -- processes --------------------------------------------------------------------------------------


def tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


def stop_process(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM the process's own group, then SIGKILL what is left after ``timeout``."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # children that outlived their parent (they share its group: it was started as a session leader)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def rss_bytes(procs: list[psutil.Process]) -> int:
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return total


def process_tree(pids: list[int]) -> list[psutil.Process]:
    tree: list[psutil.Process] = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            tree += [proc, *proc.children(recursive=True)]
    return tree


def is_rank(proc: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return RANK_MODULE in proc.cmdline()
    return False


# -- busy cores from the daemon's snapshot ----------------------------------------------------------


@dataclass
class Busy:
    cores: int  # cores whose simulated busy time grew over the window
    utilization: float  # mean over those cores, busy delta / wall delta


def core_busy(snapshot: dict) -> dict[str, float]:
    busy: dict[str, float] = {}
    for proc in snapshot.get("processes", []):
        if proc.get("kind") != "runtime":
            continue
        for core, counters in (proc.get("cores") or {}).items():
            busy[core] = busy.get(core, 0.0) + float(counters.get("busy", 0.0))
    return busy


def busy_between(before: dict, after: dict) -> Busy:
    wall = after["monotonic"] - before["monotonic"]
    start, end = core_busy(before), core_busy(after)
    deltas = [end[c] - start[c] for c in end if c in start and end[c] - start[c] > 0]
    return Busy(len(deltas), sum(deltas) / len(deltas) / wall if deltas and wall > 0 else 0.0)


class LoadMeter:
    """What the load (the daemon and a job: launcher and ranks) does from now until ``stop()``:
    the NeuronCores it keeps busy, from the daemon's snapshots, and the CPU it uses."""

    def __init__(self, run: Run, job: JobRun) -> None:
        self.run = run
        self.procs = [*run.daemon_processes(), *job.processes()]
        self.before, self.cpu = run.snapshot(), cpu_seconds(self.procs)

    def stop(self) -> tuple[Busy, float]:
        """(the busy cores, the load's CPU as a share of one core) over the window, in daemon time."""
        after, cpu = self.run.snapshot(), cpu_seconds(self.procs)
        seconds = after["monotonic"] - self.before["monotonic"]
        return busy_between(self.before, after), (cpu - self.cpu) / seconds if seconds > 0 else 0.0


# -- the job ----------------------------------------------------------------------------------------

TRACED = re.compile(r"traced (\d+) graphs in ([\d.]+) s; every rank replays them \((?:([\d.]+) s simulated compile|no)")
STEP = re.compile(r"^step\s+(\d+)/(\d+)\s")
STEP_TIME = re.compile(r"([\d.]+) (s|ms|us)/step")


@dataclass
class JobRun:
    """A running ``neuron-emulator run``: its launcher, its stdout lines and when things happened."""

    job: Job
    steps: int
    launcher: subprocess.Popen
    started: float  # time.monotonic() just before the command was started
    started_wall: float  # time.time() at the same moment (the daemon stamps attach times in wall time)
    log: Path
    lines: list[tuple[float, str]] = field(default_factory=list)  # (monotonic, stdout line)
    attached: float | None = None  # seconds from the command's start until all ranks were attached
    first_execution: float | None = None  # ... until the daemon had counted an execution
    _reader: threading.Thread | None = None

    def read_stdout(self, stream: IO[str]) -> None:
        with open(self.log, "a") as out:
            for line in stream:
                self.lines.append((time.monotonic(), line.rstrip("\n")))
                out.write(line)
                out.flush()

    def traced(self) -> tuple[int, float, float] | None:
        """(graphs, trace seconds, simulated compile seconds) from the launcher's header."""
        for _, line in self.lines:
            match = TRACED.search(line)
            if match:
                return int(match[1]), float(match[2]), float(match[3] or 0.0)
        return None

    def traced_at(self) -> float | None:
        """Seconds from the command's start until the launcher printed that the plan is ready."""
        for t, line in self.lines:
            if TRACED.search(line):
                return t - self.started
        return None

    def step_ends(self) -> dict[int, float]:
        """Monotonic time of each step's end the launcher printed (it prints as the step ends)."""
        ends: dict[int, float] = {}
        for t, line in self.lines:
            match = STEP.match(line)
            if match:
                ends[int(match[1])] = t
        return ends

    def step_seconds(self) -> float | None:
        """The simulated step time of the last step line (the first step's is a little longer)."""
        for _, line in reversed(self.lines):
            match = STEP_TIME.search(line)
            if STEP.match(line) and match:
                return float(match[1]) * {"s": 1.0, "ms": 1e-3, "us": 1e-6}[match[2]]
        return None

    def processes(self) -> list[psutil.Process]:
        """The launcher and its rank processes."""
        return process_tree([self.launcher.pid])

    def ranks(self) -> list[psutil.Process]:
        return [p for p in self.processes() if is_rank(p)]


@dataclass
class Run:
    """Everything a benchmark starts; ``close()`` removes it all."""

    prefix: str = "nt-bench-"
    tmp: Path = field(init=False)
    daemon: subprocess.Popen | None = None
    job: JobRun | None = None
    peers: list[subprocess.Popen] = field(default_factory=list)
    client: DaemonClient | None = None

    def __post_init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix=self.prefix, dir="/tmp"))

    @property
    def address(self) -> str:
        return str(self.tmp / "neuron-emulator.sock")

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_", "LOCAL_RANK", "RANK", "WORLD_SIZE"))}
        env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONUNBUFFERED"] = "1"
        env["NEURON_EMULATOR_ADDR"] = self.address
        env["NEURON_COMPILE_CACHE_URL"] = str(self.tmp / "compile-cache")
        env.update(extra)
        return env

    def spawn(self, argv: list[str], log: str, *, env: dict[str, str] | None = None, **popen: Any) -> subprocess.Popen:
        with open(self.tmp / log, "ab") as out:
            kwargs: dict[str, Any] = {"stdout": out, "stderr": out, "stdin": subprocess.DEVNULL}
            kwargs.update(popen)
            return subprocess.Popen(argv, env=env or self.env(), start_new_session=True, **kwargs)

    # daemon

    def start_daemon(self) -> None:
        argv = [str(BIN / "neuron-emulator"), "up", "--instance-type", INSTANCE_TYPE, "--socket", self.address]
        self.daemon = self.spawn(argv, "daemon.log")
        self.client = DaemonClient(parse_address(self.address), timeout=10)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.daemon.poll() is not None:
                raise BenchError(f"the daemon exited {self.daemon.returncode}: {tail(self.tmp / 'daemon.log')}")
            with contextlib.suppress(DaemonUnavailable, DaemonError):
                self.client.get("/status")
                return
            time.sleep(0.1)
        raise BenchError(f"the daemon did not answer within 30 s: {tail(self.tmp / 'daemon.log')}")

    def snapshot(self) -> dict:
        assert self.client is not None
        return self.client.get("/snapshot")

    def daemon_processes(self) -> list[psutil.Process]:
        return process_tree([self.daemon.pid]) if self.daemon is not None else []

    # the job

    def start_job(
        self, job: Job, steps: int, *, cache: str = "compile-cache", extra_env: dict[str, str] | None = None
    ) -> JobRun:
        """Start ``neuron-emulator run`` for ``job`` and return at once (see ``wait_started``).
        ``cache`` names the compile-cache directory inside the run's directory; ``extra_env``:
        more variables for the job (e.g. ``NEURON_RT_INSPECT_ENABLE``)."""
        if self.job is not None:
            raise BenchError("a job is already running")
        env = self.env(NEURON_COMPILE_CACHE_URL=str(self.tmp / cache), **(extra_env or {}))
        log = self.tmp / f"{job.key}.log"
        started, started_wall = time.monotonic(), time.time()
        launcher = self.spawn(job.run_argv(steps), f"{job.key}.stderr.log", env=env, stdout=subprocess.PIPE, text=True)
        run = JobRun(job, steps, launcher, started, started_wall, log)
        assert launcher.stdout is not None
        run._reader = threading.Thread(target=run.read_stdout, args=(launcher.stdout,), daemon=True)
        run._reader.start()
        self.job = run
        return run

    def _job_failed(self, run: JobRun, what: str) -> BenchError:
        logs = " | ".join(filter(None, (tail(run.log, 3), tail(self.tmp / f"{run.job.key}.stderr.log", 3))))
        return BenchError(f"{run.job.command}: {what}{': ' + logs if logs else ''}")

    def wait_started(self, run: JobRun, poll: float = 0.25) -> None:
        """Until every rank is attached, then until the daemon counts the job's first execution;
        fills ``run.attached`` (from the daemon's attach stamps) and ``run.first_execution`` (to
        within ``poll``)."""
        assert self.client is not None
        deadline = run.started + ATTACH_TIMEOUT
        while True:
            if run.launcher.poll() is not None:
                raise self._job_failed(run, f"exited with status {run.launcher.returncode} before its ranks attached")
            if time.monotonic() > deadline:
                raise self._job_failed(run, f"its {CORES} ranks did not attach within {ATTACH_TIMEOUT:g} s")
            with contextlib.suppress(DaemonUnavailable, DaemonError):
                runtimes = [p for p in self.client.get("/processes") if p.get("kind") == "runtime"]
                if len(runtimes) >= CORES:
                    run.attached = max(float(p["attached_at"]) for p in runtimes) - run.started_wall
                    break
            time.sleep(poll)
        traced = run.traced()
        compile_seconds = traced[2] if traced else 60.0
        deadline = time.monotonic() + compile_seconds + FIRST_EXECUTION_MARGIN
        while True:
            if run.launcher.poll() is not None:
                raise self._job_failed(run, f"exited with status {run.launcher.returncode} before its first execution")
            if time.monotonic() > deadline:
                raise self._job_failed(run, "no execution counted in time")
            with contextlib.suppress(DaemonUnavailable, DaemonError):
                snapshot = self.snapshot()
                counted = sum(sum((p.get("executions") or {}).values()) for p in snapshot.get("processes", []))
                if counted > 0:
                    run.first_execution = time.monotonic() - run.started
                    return
            time.sleep(poll)

    def wait_step(self, run: JobRun, step: int, timeout: float) -> None:
        """Until the launcher printed the end of ``step`` (it prints every step of a job under
        20 steps, then every ``steps // 10``, at most 10)."""
        deadline = time.monotonic() + timeout
        while not any(s >= step for s in run.step_ends()):
            if run.launcher.poll() is not None:
                raise self._job_failed(run, f"exited with status {run.launcher.returncode} before step {step} ended")
            if time.monotonic() > deadline:
                raise self._job_failed(run, f"step {step} did not end within {timeout:g} s")
            time.sleep(0.25)

    def wait_job(self, run: JobRun, timeout: float) -> int:
        try:
            code = run.launcher.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise self._job_failed(run, f"did not finish within {timeout:.0f} s") from None
        if run._reader is not None:
            run._reader.join(timeout=5)
        self.job = None
        return code

    def stop_job(self) -> None:
        if self.job is not None:
            stop_process(self.job.launcher)
            if self.job._reader is not None:
                self.job._reader.join(timeout=5)
            self.job = None

    # cleanup

    def close(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not leave processes behind
            signal.signal(sig, signal.SIG_IGN)
        try:
            procs = [*self.peers, *([self.job.launcher] if self.job is not None else [])]
            for proc in procs:
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGTERM)
            for proc in procs:
                stop_process(proc)
            self.stop_job()
            self.peers.clear()
            if self.daemon is not None:
                stop_process(self.daemon)
                self.daemon = None
            shutil.rmtree(self.tmp, ignore_errors=True)
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


# -- a benchmark's frame ----------------------------------------------------------------------------


def missing_tools(benchmark: str, *names: str) -> bool:
    """True, after saying so on stderr, when a console script ``names`` lists is not next to this Python."""
    missing = [n for n in names if not (BIN / n).exists()]
    if missing:
        print(
            f"{benchmark}: {', '.join(missing)} not found next to {sys.executable}; "
            "run with the project's .venv/bin/python",
            file=sys.stderr,
        )
    return bool(missing)


def benchmark_parser(doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's command line, described by the first line of its docstring."""
    return argparse.ArgumentParser(description=(doc or "").splitlines()[0])


def add_job_option(parser: argparse.ArgumentParser, default: str) -> None:
    """``--job KEY``: the training job on all cores."""
    parser.add_argument(
        "--job",
        choices=list(JOBS),
        default=default,
        help=f"the training job on all {CORES} cores (default {default})",
    )


def run_benchmark(
    benchmark: str, prefix: str, body: Callable[[Run], None], report: Callable[[], None] | None = None
) -> int:
    """``body`` with a fresh ``Run`` (temporary directory named ``prefix...``), SIGTERM and Ctrl-C
    unwinding it (``handle_signals``); the run is closed whatever happens. Then, when it went
    well, ``report`` and the total run time. Returns the exit status: 0, 130 when interrupted, 1
    after printing ``benchmark: why`` when a ``BenchError`` stops it."""
    t0 = time.monotonic()
    handle_signals()
    run = Run(prefix=prefix)
    try:
        body(run)
    except (KeyboardInterrupt, Interrupted):
        print("\ninterrupted; cleaning up", file=sys.stderr)
        return 130
    except BenchError as exc:
        print(f"{benchmark}: {exc}", file=sys.stderr)
        return 1
    finally:
        run.close()
    if report is not None:
        report()
        print(f"\ntotal run time {time.monotonic() - t0:.0f} s")
    return 0
