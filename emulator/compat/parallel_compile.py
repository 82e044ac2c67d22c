"""``neuron_parallel_compile CMD ...`` under ``neuron-emulator exec`` (docs/run-your-script.md).

As Neuron's tool does, it runs the training command once with ``NEURON_PARALLEL_COMPILE=1``,
``NEURON_EXTRACT_GRAPHS_ONLY=1`` and ``NEURON_FALL_BACK_TO_NULL_NEFF=1``: every new step graph
is extracted into the compile cache instead of being compiled, and nothing is executed on the
NeuronCores (the values are still computed on the CPU; on Neuron they are zeros, and scripts
skip their checks when ``NEURON_EXTRACT_GRAPHS_ONLY`` is set). Then it compiles the extracted
graphs, ``--num_parallel`` at a time, each taking its simulated compile time
(docs/cost-model.md), and marks them compiled in the cache: the next run of the command finds
every graph there ("Using a cached neff") and compiles nothing. ``--command collect`` or
``compile`` runs one phase. The exit status is the command's (collect) or 1 if a graph failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from emulator.lifecycle import parent_death_preexec
from emulator.runtime.compile_cache import EXTRACTED, cache_settings, finish_compile, pending_graphs

PROG = "neuron_parallel_compile"
DEFAULT_PARALLEL = 8  # the real tool's default is not documented; 8 is an assumption (docs/run-your-script.md)
COLLECT_ENV = {"NEURON_PARALLEL_COMPILE": "1", "NEURON_EXTRACT_GRAPHS_ONLY": "1", "NEURON_FALL_BACK_TO_NULL_NEFF": "1"}


def _log(tag: str, message: str) -> None:
    print(f"INFO ||{tag}||: {message}", file=sys.stderr, flush=True)


def collect(argv: Sequence[str]) -> int:
    env = {**os.environ, **COLLECT_ENV}
    try:
        proc = subprocess.Popen(list(argv), env=env, preexec_fn=parent_death_preexec())
    except OSError as exc:
        print(f"{PROG}: {argv[0]}: {exc.strerror}", file=sys.stderr)
        return 127
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        return proc.wait()


def compile_pending(cache_dir: Path, parallel: int) -> int:
    """Compile every extracted graph; the number that failed."""
    modules = pending_graphs(cache_dir)
    _log(
        "NEURON_CACHE",
        f"Current remaining items are {len(modules)}, locked are 0, failed are 0, done are 0, total is {len(modules)}",
    )
    if modules:
        _log("NEURON_PARALLEL_COMPILE", f"master grab hlos to compile: {[str(m / EXTRACTED) for m in modules]}")
    report: dict[str, dict[str, object]] = {}
    lock = threading.Lock()

    def one(module: Path) -> None:
        try:
            seconds = float(json.loads((module / EXTRACTED).read_text())["compile_seconds"])
            time.sleep(seconds)  # the simulated compile time (docs/cost-model.md)
            finish_compile(module)
            ok = True
        except (OSError, ValueError, KeyError):
            ok = False
        with lock:
            report[str(module / EXTRACTED)] = {"status": ok, "retry": 0}

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        list(pool.map(one, modules))
    good = sum(1 for r in report.values() if r["status"])
    summary = {"compilation_summary": {"true": good, **({"false": len(report) - good} if len(report) > good else {})}}
    _log("NEURON_PARALLEL_COMPILE", json.dumps({**summary, "compilation_report": report}))
    _log("NEURON_PARALLEL_COMPILE", f"Total graphs: {len(report)}")
    _log("NEURON_PARALLEL_COMPILE", f"Total successful compilations: {good}")
    _log("NEURON_PARALLEL_COMPILE", f"Total failed compilations: {len(report) - good}")
    _log(
        "NEURON_PARALLEL_COMPILE",
        f"Compiled in {time.monotonic() - started:.1f} s (simulated compile times, {parallel} at a time)",
    )
    return len(report) - good


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run a training command to extract its graphs, then compile them in parallel into the "
        "Neuron compile cache, so the next run compiles nothing (neuron-emulator: docs/run-your-script.md).",
    )
    parser.add_argument(
        "--num_parallel", type=int, default=DEFAULT_PARALLEL, metavar="N", help="graphs compiled at once"
    )
    parser.add_argument("--command", choices=("all", "collect", "compile"), default="all", help="phase(s) to run")
    parser.add_argument("argv", nargs=argparse.REMAINDER, metavar="CMD [ARG ...]", help="the training command")
    args = parser.parse_args(argv)
    if args.num_parallel < 1:
        parser.error(f"--num_parallel {args.num_parallel}: expected at least 1")
    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if args.command != "compile" and not command:
        parser.error("give the training command, e.g. neuron_parallel_compile torchrun --nproc_per_node=2 train.py")
    cache_dir, _ = cache_settings(os.environ)
    if cache_dir is None:
        print(
            f"{PROG}: the compile cache is off (--no_cache or a remote cache URL): nothing to compile into",
            file=sys.stderr,
        )
        return 2
    _log("NEURON_CACHE", f"Compile cache path: {cache_dir}")
    status = 0
    if args.command in ("all", "collect"):
        status = collect(command)
        if status != 0:
            print(
                f"{PROG}: the command exited with status {status}; its extracted graphs are compiled anyway",
                file=sys.stderr,
            )
    if args.command in ("all", "compile"):
        failed = compile_pending(cache_dir, args.num_parallel)
        status = status or (1 if failed else 0)
    return status


if __name__ == "__main__":
    sys.exit(main())
