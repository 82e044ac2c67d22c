"""``neuron-emulator run MODEL --tp/--pp/--dp ...`` for model-scale workloads.

1. Plan the job once (``job.plan_job``): trace each distinct program, cost it, simulate the step.
   A shard that does not fit its NeuronCore fails here with the runtime's ``NRT_RESOURCE`` error.
2. Put the graphs into the persistent compile cache (as ``neuron_parallel_compile`` does), write
   the job plan, start one rank process per NeuronCore (``replay.py``: own PID, own command line,
   its core claimed from the daemon) and wait until every rank is attached.
3. Give the ranks one common start time; they replay the planned step on the device clock in
   lockstep: after each step every rank reports when it ended, and the next step starts for all
   at the latest end (across hosts: the launchers meet at a c10d store, ``rendezvous.py``). This
   process prints each step as it ran, reports it to the nodes' daemons (``job_report.py``), then
   the summary. A rank lost meanwhile fails the job on every node (docs/multinode.md).

The ranks of a multi-node job run on their own nodes' daemons (``nodes.py``): every node of a
cluster on this host, or this host's node when each host runs its own launcher.

Every rank dies with the launcher: SIGINT/SIGTERM/SIGHUP here stop them all; if the launcher is
killed outright, each rank's stdin closes (and its parent-death signal fires) and it exits.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from emulator.lifecycle import LAUNCHER_PID_ENV, Stopped, stop_on_signals
from emulator.parallel.job import JobPlan
from emulator.parallel.job_report import JobReporter
from emulator.parallel.nodes import NodeTargets, single_node
from emulator.parallel.plan_file import JOB_ID_ENV, JOB_PLAN_ENV, RANKS_ENV, plan_document, write_plan
from emulator.parallel.ranks import RankPlace
from emulator.parallel.rendezvous import (
    JobAborted,
    LocalRendezvous,
    Rendezvous,
    StoreRendezvous,
    new_job_id,
    peer_timeout,
)
from emulator.parallel.schedule_files import PROFILE_REQUEST, ScheduleFiles
from emulator.runtime.compile_cache import CompileCache, LoadedModel, cache_settings
from emulator.workloads.errors import ERROR_PREFIX, report_error
from emulator.workloads.summary import number_ranges
from neurontools.contract.profile import inspect_settings

READY_TIMEOUT_S = 120.0  # 32 ranks starting on a 2-vCPU host take a few seconds


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
    targets: NodeTargets | None = None,
    ranks_per_process: int = 1,
) -> int:
    """Run the planned job for ``steps`` steps on the nodes of ``targets`` (default: the one
    daemon of ``env``); 0, or 1 when a rank failed (its error is on stderr), 130/143 when stopped
    by a signal."""
    if targets is None:
        targets = single_node(env.get("NEURON_EMULATOR_ADDR", ""))
    with stop_on_signals():  # docs/lifecycle.md: a stop signal stops every rank, then 128 + signal
        try:
            return _launch(
                plan,
                steps=steps,
                flags=flags,
                env=env,
                on_step=on_step,
                targets=targets,
                ranks_per_process=ranks_per_process,
            )
        except Stopped as stopped:
            return stopped.status


def _rendezvous(plan: JobPlan, targets: NodeTargets) -> Rendezvous:
    if not targets.distributed:
        return LocalRendezvous(new_job_id(plan.model))
    assert targets.node_rank is not None
    return StoreRendezvous(
        plan.model,
        nodes=targets.nodes,
        node_rank=targets.node_rank,
        addr=targets.master_addr,
        port=targets.master_port,
        timeout=READY_TIMEOUT_S,
    )


class _Ranks:
    """This launcher's rank processes (each driving one rank, or a group of a node's ranks), their
    logs, and the lockstep protocol with them. ``schedules``: the graphs' schedule files, which a
    rank that profiles asks for (``step N END profile``: schedule_files.py)."""

    def __init__(self, groups: list[list[RankPlace]], schedules: ScheduleFiles | None = None) -> None:
        self.groups = groups
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []
        self.schedules = schedules

    def start(self, plan: JobPlan, flags: Sequence[str], workdir: Path, envs: list[dict[str, str]]) -> None:
        """Start one replay process per group, each with its environment and its log."""
        for group, rank_env in zip(self.groups, envs, strict=True):
            log = workdir / f"rank{group[0].rank}.log"
            self.logs.append(log)
            with open(log, "w") as err:
                self.procs.append(
                    subprocess.Popen(
                        rank_command(plan.model, flags),
                        env=rank_env,
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=err,
                        text=True,
                    )
                )

    def send(self, line: str, only: list[int] | None = None) -> None:
        for i, p in enumerate(self.procs):
            if (only is None or i in only) and p.poll() is None and p.stdin is not None:
                try:
                    p.stdin.write(line + "\n")
                    p.stdin.flush()
                except OSError:
                    pass

    def collect(self, step: int) -> dict[int, float]:
        """Every rank's end of ``step`` (its process's ``step N END`` line); raises _RankLost."""
        pending = {p.stdout.fileno(): i for i, p in enumerate(self.procs) if p.stdout is not None}
        ends: dict[int, float] = {}
        while pending:
            ready, _, _ = select.select(list(pending), [], [], 0.5)
            for fd in ready:
                i = pending[fd]
                stdout = self.procs[i].stdout
                assert stdout is not None
                line = stdout.readline().split()
                if len(line) in (3, 4) and line[0] == "step" and int(line[1]) == step:
                    for place in self.groups[i]:
                        ends[place.rank] = float(line[2])
                    del pending[fd]
                    if line[3:] == [PROFILE_REQUEST] and self.schedules is not None:  # the rank profiles
                        self.schedules.request({place.pp_rank for place in self.groups[i]})
                elif not line:  # end of output: the process is gone
                    self.procs[i].wait()
                    raise _RankLost(self.groups[i], self.procs[i].returncode)
            if not ready:
                for i in pending.values():
                    code = self.procs[i].poll()
                    if code is not None:
                        raise _RankLost(self.groups[i], code)
        return ends


def rank_groups(places: list[RankPlace], per_process: int) -> list[list[RankPlace]]:
    """The ranks each replay process drives: ``per_process`` consecutive ranks of one node."""
    groups: list[list[RankPlace]] = []
    for place in places:
        if groups and groups[-1][-1].node == place.node and len(groups[-1]) < per_process:
            groups[-1].append(place)
        else:
            groups.append([place])
    return groups


class _RankLost(Exception):
    def __init__(self, group: list[RankPlace], code: int) -> None:
        super().__init__(group[0].rank)
        self.group = group
        self.code = code


def _launch(
    plan: JobPlan,
    *,
    steps: int,
    flags: Sequence[str],
    env: dict[str, str],
    on_step: Callable[[int, float], None],
    targets: NodeTargets,
    ranks_per_process: int,
) -> int:
    models, compile_seconds = load_models(plan, env)
    local = [p for p in plan.places if p.node in targets.addresses]
    try:
        profiling = inspect_settings(env).enabled
        rdzv = _rendezvous(plan, targets)
    except (JobAborted, ValueError) as exc:
        report_error(str(exc))
        return 1
    workdir = Path(tempfile.mkdtemp(prefix="neuron-emulator-job-"))
    plan_path = workdir / "plan.json"
    schedules = ScheduleFiles(plan, workdir / "profile")
    ranks = _Ranks(rank_groups(local, ranks_per_process), schedules)
    try:
        document = plan_document(
            plan, steps=steps, models=models, compile_seconds=compile_seconds, profile_dir=str(schedules.directory)
        )
        write_plan(document, plan_path)
        if profiling:  # NEURON_RT_INSPECT_ENABLE=1: every rank profiles from its first step
            schedules.write({p.pp_rank for p in local})
        envs = [_rank_env(plan, g, env, targets, job_id=rdzv.job_id, plan_path=plan_path) for g in ranks.groups]
        ranks.start(plan, flags, workdir, envs)
        if not _wait_ready(ranks.procs):
            message = _first_error(ranks.logs) or "a rank exited before attaching to its NeuronCore"
            rdzv.abort(f"node {sorted(targets.addresses)[0]}: {message}")
            _kill_all(ranks.procs)
            report_error(message)
            return 1
        _run_steps(plan, ranks, rdzv, targets, steps=steps, compile_seconds=compile_seconds, on_step=on_step)
        return _finish(ranks, rdzv)
    except _RankLost as lost:
        cause = _first_error(ranks.logs) or _exit_text(lost.group, lost.code)
        rdzv.abort(cause)
        return _fail_job(ranks, cause)
    except JobAborted as exc:
        return _fail_job(ranks, str(exc))
    finally:
        _kill_all(ranks.procs)
        _clean_up(ranks, workdir)


def _clean_up(ranks: _Ranks, workdir: Path) -> None:
    """Close the ranks' pipes; remove the plan, the logs and the schedule files."""
    for p in ranks.procs:
        for stream in (p.stdin, p.stdout):
            if stream is not None:
                stream.close()
    if ranks.schedules is not None:
        ranks.schedules.join()
    shutil.rmtree(workdir, ignore_errors=True)


def _rank_env(
    plan: JobPlan, group: list[RankPlace], env: dict[str, str], targets: NodeTargets, *, job_id: str, plan_path: Path
) -> dict[str, str]:
    """The environment of the replay process driving ``group`` (torchrun's variables, its cores)."""
    place = group[0]
    tag = f"{plan.model}-rank{place.rank}" + (f"-{group[-1].rank}" if len(group) > 1 else "")
    rank_env = {
        **env,
        JOB_PLAN_ENV: str(plan_path),
        JOB_ID_ENV: job_id,
        RANKS_ENV: ",".join(str(p.rank) for p in group),
        "NEURON_EMULATOR_ADDR": targets.addresses[place.node],
        "RANK": str(place.rank),
        "LOCAL_RANK": str(place.core),
        "GROUP_RANK": str(place.node),
        "WORLD_SIZE": str(plan.config.world),
        "LOCAL_WORLD_SIZE": str(plan.config.ranks_per_node),
        "NEURON_RT_VISIBLE_CORES": ",".join(str(p.core) for p in group),
        "NEURON_PROCESS_TAG": env.get("NEURON_PROCESS_TAG") or tag,
        LAUNCHER_PID_ENV: str(os.getpid()),
    }
    if targets.distributed:
        rank_env.update(MASTER_ADDR=targets.master_addr, MASTER_PORT=str(targets.master_port))
    rank_env.pop("NEURON_RT_NUM_CORES", None)
    if len(group) > 1:  # LOCAL_RANK would pick one core of the visible ones (core_spec.py)
        del rank_env["LOCAL_RANK"]
    return rank_env


def _run_steps(
    plan: JobPlan,
    ranks: _Ranks,
    rdzv: Rendezvous,
    targets: NodeTargets,
    *,
    steps: int,
    compile_seconds: float,
    on_step: Callable[[int, float], None],
) -> None:
    """Start the ranks together and pace them step by step, each step ending when the slowest
    rank of every node has ended it."""
    reporter = JobReporter(rdzv.job_id, targets, plan)
    # wall clock <-> this host's monotonic clock (the ranks' times); the store carries wall times
    offset = time.time() - time.monotonic()
    t0 = rdzv.start() - offset
    ranks.send(repr(t0))
    start = t0 + compile_seconds
    patience = peer_timeout()
    for step in range(1, steps + 1):
        ends = ranks.collect(step)
        end = rdzv.step_end(step, max(ends.values()) + offset, patience) - offset
        reporter.step(step, start, end, ends)
        on_step(step, end - start)
        if step < steps:
            ranks.send(f"go {end!r}")
        start = end


def _finish(ranks: _Ranks, rdzv: Rendezvous) -> int:
    """Wait (10 s at most) for the ranks to exit; 1 with the first error if one failed."""
    deadline = time.monotonic() + 10
    while any(p.poll() is None for p in ranks.procs) and time.monotonic() < deadline:
        time.sleep(0.02)
    codes = [p.poll() or 0 for p in ranks.procs]
    if any(codes):
        report_error(_first_error(ranks.logs) or f"a rank exited with status {max(codes)}")
        return 1
    rdzv.close()
    return 0


def _exit_text(group: list[RankPlace], code: int) -> str:
    how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
    first, last = group[0], group[-1]
    if len(group) == 1:
        return f"rank {first.rank} (node {first.node}, nc{first.core}) {how}"
    return f"the process of ranks {first.rank}-{last.rank} (node {first.node}, nc{first.core}-nc{last.core}) {how}"


def _fail_job(ranks: _Ranks, cause: str) -> int:
    """A rank is gone: the others time out in their next collective (each reports it to its node
    and exits with the runtime's error); one line for the cause, one per node for the rest."""
    survivors = [i for i, p in enumerate(ranks.procs) if p.poll() is None]
    ranks.send(f"abort {cause}", survivors)
    deadline = time.monotonic() + 5
    while any(ranks.procs[i].poll() is None for i in survivors) and time.monotonic() < deadline:
        time.sleep(0.02)
    report_error(cause)
    by_node: dict[int, list[int]] = {}
    for i in survivors:
        for place in ranks.groups[i]:
            by_node.setdefault(place.node, []).append(place.rank)
    for node, members in sorted(by_node.items()):
        span = number_ranges("rank", members)
        report_error(f"node {node}: {len(members)} rank(s) ({span}) stopped with NRT_TIMEOUT in their next collective")
    return 1


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
