"""``neuron-emulator run MODEL --tp/--pp/--dp ...`` for model-scale workloads.

1. Plan the job once (``job.plan_job``): trace each distinct program, cost it, simulate the step.
   A shard that does not fit its NeuronCore fails here with the runtime's ``NRT_RESOURCE`` error.
2. Put the graphs into the persistent compile cache (as ``neuron_parallel_compile`` does), write
   the job plan, start one rank process per NeuronCore (``replay.py``: own PID, own command line,
   its core claimed from the daemon) and wait until every rank is attached.
3. Give the ranks one common start time; they replay the planned step on the device clock while
   this process prints progress from the same plan, then the summary.

Every rank dies with the launcher: SIGINT/SIGTERM/SIGHUP here stop them all; if the launcher is
killed outright, each rank's stdin closes (and its parent-death signal fires) and it exits.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from emulator.lifecycle import LAUNCHER_PID_ENV, Stopped, stop_on_signals
from emulator.parallel.job import JobPlan
from emulator.parallel.plan_file import JOB_PLAN_ENV, plan_document, write_plan
from emulator.runtime.compile_cache import CompileCache, LoadedModel, cache_settings
from emulator.workloads.errors import ERROR_PREFIX, report_error

READY_TIMEOUT_S = 120.0  # 32 ranks starting on a 2-vCPU host take a few seconds
START_MARGIN_S = 0.2


def load_models(plan: JobPlan, env: dict[str, str]) -> tuple[dict[tuple[int, str], LoadedModel], float]:
    """Each stage's graphs as loaded models; store them in the persistent cache. Returns the
    models and the simulated compile time before step 1: the graphs the cache did not hold yet,
    on the slowest stage (stages compile in parallel, each its own graphs)."""
    cache_dir, flags = cache_settings(env)
    models: dict[tuple[int, str], LoadedModel] = {}
    compile_seconds = 0.0
    for stage, cost in plan.stages.items():
        cache = CompileCache(cache_dir, flags)  # model ids count from 10001 in every process
        stage_seconds = 0.0
        for name, graph in cost.program.graphs.items():
            if not cache.on_disk(graph.graph_hash):
                stage_seconds += graph.compile_seconds
                cache.store(graph.graph_hash, (), graph.code_bytes)
            models[(stage, name)] = cache.load(graph.graph_hash, (), graph.code_bytes)
        compile_seconds = max(compile_seconds, stage_seconds)
    return models, compile_seconds


def rank_command(model: str, flags: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "emulator.parallel.replay", model, *flags]


def _kill_all(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + 5
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _first_error(logs: list[Path]) -> str | None:
    for log in logs:
        try:
            for line in log.read_text(errors="replace").splitlines():
                if line.startswith(ERROR_PREFIX):
                    return line[len(ERROR_PREFIX) :]
        except OSError:
            continue
    return None


def launch(
    plan: JobPlan,
    *,
    steps: int,
    flags: Sequence[str],
    env: dict[str, str],
    on_step: Callable[[int, float], None] = lambda step, seconds: None,
) -> int:
    """Run the planned job on the daemon's cores for ``steps`` steps; 0, or 1 when a rank failed
    (its error is on stderr), 130/143 when stopped by a signal."""
    with stop_on_signals():  # docs/lifecycle.md: a stop signal stops every rank, then 128 + signal
        try:
            return _launch(plan, steps=steps, flags=flags, env=env, on_step=on_step)
        except Stopped as stopped:
            return stopped.status


def _launch(
    plan: JobPlan,
    *,
    steps: int,
    flags: Sequence[str],
    env: dict[str, str],
    on_step: Callable[[int, float], None],
) -> int:
    models, compile_seconds = load_models(plan, env)
    procs: list[subprocess.Popen] = []
    logs: list[Path] = []
    workdir = Path(tempfile.mkdtemp(prefix="neuron-emulator-job-"))
    plan_path = workdir / "plan.json"
    try:
        write_plan(plan_document(plan, steps=steps, models=models, compile_seconds=compile_seconds), plan_path)
        for place in plan.places:
            log = workdir / f"rank{place.rank}.log"
            logs.append(log)
            rank_env = {
                **env,
                JOB_PLAN_ENV: str(plan_path),
                "RANK": str(place.rank),
                "LOCAL_RANK": str(place.core),
                "WORLD_SIZE": str(plan.config.world),
                "LOCAL_WORLD_SIZE": str(plan.config.ranks_per_node),
                "NEURON_RT_VISIBLE_CORES": str(place.core),
                "NEURON_PROCESS_TAG": env.get("NEURON_PROCESS_TAG") or f"{plan.model}-rank{place.rank}",
                LAUNCHER_PID_ENV: str(os.getpid()),
            }
            rank_env.pop("NEURON_RT_NUM_CORES", None)
            with open(log, "w") as err:
                procs.append(
                    subprocess.Popen(
                        rank_command(plan.model, flags),
                        env=rank_env,
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=err,
                        text=True,
                    )
                )
        if not _wait_ready(procs):
            _kill_all(procs)
            report_error(_first_error(logs) or "a rank exited before attaching to its NeuronCore")
            return 1
        t0 = time.monotonic() + START_MARGIN_S
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(f"{t0!r}\n")
            p.stdin.flush()
        end = t0 + compile_seconds
        for step in range(1, steps + 1):
            length = plan.first_timeline.step_seconds if step == 1 else plan.step_seconds
            end += length
            if not _sleep_watching(procs, end):
                _kill_all(procs)
                report_error(_first_error(logs) or "a rank stopped unexpectedly")
                return 1
            on_step(step, length)
        # a rank on a slow core (docs/faults.md) ends later than the plan: wait for it, watching
        while any(p.poll() is None for p in procs) and _sleep_watching(procs, time.monotonic() + 0.1):
            pass
        codes = [p.poll() or 0 for p in procs]
        if any(codes):
            report_error(_first_error(logs) or f"a rank exited with status {max(codes)}")
            return 1
        return 0
    finally:
        _kill_all(procs)
        for p in procs:
            for stream in (p.stdin, p.stdout):
                if stream is not None:
                    stream.close()
        for path in [*logs, plan_path]:
            path.unlink(missing_ok=True)
        workdir.rmdir()


def _wait_ready(procs: list[subprocess.Popen]) -> bool:
    """Wait for every rank's ``ready`` line; False when one exits first or time runs out."""
    pending = {p.stdout.fileno(): p for p in procs if p.stdout is not None}
    deadline = time.monotonic() + READY_TIMEOUT_S
    while pending:
        ready, _, _ = select.select(list(pending), [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return False
        for fd in ready:
            p = pending[fd]
            assert p.stdout is not None
            line = p.stdout.readline()
            if line.strip() != "ready":
                return False
            del pending[fd]
    return True


def _sleep_watching(procs: list[subprocess.Popen], until: float) -> bool:
    """Sleep until ``until``; False as soon as a rank has exited with an error."""
    while True:
        if any(p.poll() not in (None, 0) for p in procs):
            return False
        remaining = until - time.monotonic()
        if remaining <= 0:
            return True
        time.sleep(min(remaining, 0.5))
