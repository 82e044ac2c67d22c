"""Data-parallel runs: ``torchrun --standalone --nproc-per-node N`` starting one worker process per
rank (``python -m emulator.cli.worker``); each rank attaches and claims one NeuronCore (its
local rank, or the r-th core of ``NEURON_RT_VISIBLE_CORES``) and joins a gloo process group.

torchrun's own stderr (launcher warnings, its failure report with a Python traceback) is held back:
the workers' one-line errors are passed on once each, a rank killed by a signal is named in one
line, and only a worker that died without either (a bug) gets torchrun's full output shown.

Stopping (docs/lifecycle.md): SIGINT, SIGTERM or SIGHUP here sends SIGTERM to torchrun, which
stops its workers and exits; this process then returns 128 + the signal. torchrun runs in its own
session (a Ctrl-C reaches only this process, which stops the job in order) and gets SIGTERM if
this process dies, even by SIGKILL; every worker gets SIGTERM if torchrun dies.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from emulator.lifecycle import LAUNCHER_PID_ENV, Stopped, parent_death_preexec, stop_on_signals
from emulator.workloads.errors import ERROR_PREFIX, FORMAT_ENV, decode_error_line

# the emulated runtime's own log lines a user should see (emulator/runtime/attach.py)
RUNTIME_LOG_MARKS = (" ERROR  NRT:", " WARN   NRT:", " INFO   NRT:")
STOP_TIMEOUT_S = 10.0  # torchrun's own shutdown of its workers takes well under a second
# torchrun's failure report: "rank : 1 (local_rank: 1)", "exitcode : -9 (pid: 1234)"
_REPORT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_REPORT_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-\d+)\s*\(pid:\s*(\d+)\)")


def torchrun_argv(nproc: int, worker_args: Sequence[str]) -> list[str]:
    """The command line: ``torchrun`` next to this interpreter (else ``python -m torch.distributed.run``)."""
    torchrun = Path(sys.executable).parent / "torchrun"
    launcher = [str(torchrun)] if torchrun.is_file() else [sys.executable, "-m", "torch.distributed.run"]
    return [
        *launcher,
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        "-m",
        "emulator.cli.worker",
        *worker_args,
    ]


class _Output:
    """torchrun's stderr, read by a thread: held, with the workers' error lines passed on once."""

    def __init__(self) -> None:
        self.held: list[str] = []
        self.passed: set[str] = set()
        self.lock = threading.Lock()
        self.quiet = False  # stopping: the ranks' complaints about each other are noise now

    def pump(self, stream: Iterable[str]) -> None:
        for raw in stream:
            line = raw.rstrip("\n")
            message = decode_error_line(line)
            shown = ERROR_PREFIX + message if message is not None else line
            with self.lock:
                self.held.append(shown)
                wanted = message is not None or any(mark in line for mark in RUNTIME_LOG_MARKS)
                if wanted and shown not in self.passed and not self.quiet:
                    self.passed.add(shown)
                    print(shown, file=sys.stderr, flush=True)

    def errors_passed(self) -> bool:
        return any(line.startswith(ERROR_PREFIX) or " ERROR  NRT:" in line for line in self.passed)


def killed_ranks(lines: Sequence[str]) -> list[tuple[int, int, int]]:
    """(rank, pid, signal) of the rank torchrun's failure report names as the root cause when a
    signal killed it (the other ranks torchrun stopped itself are listed too, but not as that)."""
    roots = [i for i, line in enumerate(lines) if line.startswith("Root Cause")]
    found: list[tuple[int, int, int]] = []
    rank: int | None = None
    for line in lines[roots[-1] :] if roots else lines:
        if m := _REPORT_RANK.match(line):
            rank = int(m.group(1))
        elif (m := _REPORT_EXIT.match(line)) and rank is not None:
            found.append((rank, int(m.group(2)), -int(m.group(1))))
            rank = None
    return sorted(set(found))


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to torchrun (it stops its workers); SIGKILL if it does not exit in time (its
    workers then get their parent-death signal)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def launch(nproc: int, worker_args: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """Run the job; return 0, 1 when a rank failed (its error line is already on stderr), or
    128 + the signal that stopped it."""
    argv = torchrun_argv(nproc, worker_args)
    out = _Output()
    proc: subprocess.Popen | None = None
    pump: threading.Thread | None = None
    with stop_on_signals():
        try:
            proc = subprocess.Popen(
                argv,
                env={**(os.environ if env is None else env), FORMAT_ENV: "json", LAUNCHER_PID_ENV: str(os.getpid())},
                stdin=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                start_new_session=True,
                preexec_fn=parent_death_preexec(signal.SIGTERM),
            )
            pump = threading.Thread(target=out.pump, args=(proc.stderr,), daemon=True)
            pump.start()
            code = proc.wait()
        except Stopped as stopped:
            with out.lock:
                out.quiet = True
            if proc is not None:
                _stop(proc)
            return stopped.status
        finally:
            if pump is not None:
                pump.join(timeout=5)
            if proc is not None and proc.stderr is not None:
                proc.stderr.close()
    if code == 0:
        return 0
    with out.lock:
        killed = killed_ranks(out.held)
        for rank, pid, signum in killed:  # not a bug: which rank a signal took, without torchrun's traceback
            print(f"{ERROR_PREFIX}rank {rank} (pid {pid}) was killed by {_signal_name(signum)}", file=sys.stderr)
        if killed or out.errors_passed():
            return 1
        for line in out.held:  # no worker said why: show everything (a crash is a bug worth its traceback)
            print(line, file=sys.stderr)
        print(f"{ERROR_PREFIX}torchrun exited with status {code}", file=sys.stderr, flush=True)
    return 1
