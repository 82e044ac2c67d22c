"""Data-parallel runs: ``torchrun --standalone --nproc-per-node N`` starting one worker process per
rank (``python -m emulator.workloads.worker``); each rank attaches and claims one NeuronCore (its
local rank, or the r-th core of ``NEURON_RT_VISIBLE_CORES``) and joins a gloo process group.

torchrun's own stderr (launcher warnings, its failure report with a Python traceback) is held back:
the workers' one-line errors are passed on once each, and only a worker that died without such a
line (a bug) gets torchrun's full output shown.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from emulator.workloads.errors import ERROR_PREFIX, FORMAT_ENV, decode_error_line

RUNTIME_LOG_MARK = " ERROR  NRT:"  # the emulated runtime's own log lines


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
        "emulator.workloads.worker",
        *worker_args,
    ]


def _pump(stream, held: list[str], passed: set[str], lock: threading.Lock) -> None:  # type: ignore[no-untyped-def]
    for raw in stream:
        line = raw.rstrip("\n")
        message = decode_error_line(line)
        shown = ERROR_PREFIX + message if message is not None else line
        with lock:
            held.append(shown)
            if (message is not None or RUNTIME_LOG_MARK in line) and shown not in passed:
                passed.add(shown)
                print(shown, file=sys.stderr, flush=True)


def launch(nproc: int, worker_args: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """Run the job; return 0, or 1 when a rank failed (its error line is already on stderr)."""
    argv = torchrun_argv(nproc, worker_args)
    proc = subprocess.Popen(
        argv,
        env={**(os.environ if env is None else env), FORMAT_ENV: "json"},
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    )
    held: list[str] = []
    passed: set[str] = set()
    lock = threading.Lock()
    pump = threading.Thread(target=_pump, args=(proc.stderr, held, passed, lock), daemon=True)
    pump.start()
    try:
        code = proc.wait()
    except KeyboardInterrupt:  # torchrun got the same SIGINT and stops its workers
        try:
            proc.wait(timeout=30)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            proc.kill()
            proc.wait()
        return 130
    finally:
        pump.join(timeout=5)
    if code == 0:
        return 0
    with lock:
        if not passed:  # no worker said why: show everything (a crash is a bug worth its traceback)
            for line in held:
                print(line, file=sys.stderr)
            print(f"{ERROR_PREFIX}torchrun exited with status {code}", file=sys.stderr, flush=True)
    return 1
