"""One rank of a model-scale parallel job: attach, hold a NeuronCore, replay the traced step.

``python -m emulator.parallel.replay MODEL [run flags]`` is started once per rank by
``neuron-emulator run`` (``emulator.parallel.launch``), like a torchrun worker: the same command
line for every rank, the rank in ``RANK``, the core in ``NEURON_RT_VISIBLE_CORES``, the job plan
(``plan_file.py``) in ``NEURON_EMULATOR_JOB_PLAN``. It imports no torch: a rank costs a few MB
and almost no CPU, so a whole trn1.32xlarge (32 ranks) runs on a small host.

Protocol with the launcher: after attaching, the rank prints ``ready`` on stdout; the launcher
answers one line on stdin, the job's start time (``time.monotonic()``, shared by every process
on the host). From then on the rank follows the planned timeline: at the start of every step it
sends that step's executions (each with its own start time) in one batch, then sleeps until the
step ends. End of stdin (the launcher is gone) or SIGTERM stops it; the cores are released at exit.
A restarted daemon is re-joined with the shard's HBM and loaded graphs (docs/lifecycle.md).
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import Any

from emulator.lifecycle import die_with_parent, launcher_pid
from emulator.parallel.plan_file import JOB_PLAN_ENV, RANKS_ENV, GraphEntry, RankPlan, load_rank_plan
from emulator.parallel.rank_profile import RankProfile
from emulator.runtime.attach import RuntimeSession, attach, detach
from emulator.runtime.errors import NeuronRuntimeError
from emulator.runtime.execution import (
    CompileCacheCounter,
    CoreMemory,
    Execution,
    Holding,
    MemoryReport,
    Work,
    execution,
)
from emulator.runtime.faults import NO_FAULTS, CoreFaults
from neurontools.http_limits import REPLAY_BATCH_BYTES
from neurontools.sources.daemon_client import DaemonError, DaemonUnavailable

ERROR_PREFIX = "neuron-emulator: error: "


def _wait_line(session: RuntimeSession, deadline: float | None) -> str | None:
    """A line from stdin (None at end of input or when the deadline passes first). Raises the
    runtime's error when it fails meanwhile (a restarted daemon gave our core away)."""
    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
    ready, _, _ = select.select([sys.stdin, session.failure_fd], [], [], timeout)
    session.raise_if_failed()
    if not ready:
        return None
    line = sys.stdin.readline()
    return line if line else None


def _sleep_listening(session: RuntimeSession, until: float) -> str | None:
    """Sleep until ``until``; returns None then, ``""`` as soon as stdin reaches its end (the
    launcher is gone), or a line the launcher sent meanwhile (an ``abort``). Raises the runtime's
    error when it fails meanwhile."""
    while True:
        remaining = until - time.monotonic()
        if remaining <= 0:
            return None
        ready, _, _ = select.select([sys.stdin, session.failure_fd], [], [], remaining)
        session.raise_if_failed()
        if ready:
            return sys.stdin.readline()


def _resume(plans: list[RankPlan]) -> dict[str, list[dict[str, Any]]] | None:
    """What the ranks have shown the daemon so far — their shards' HBM and the graphs loaded — for
    registering again with a restarted daemon (docs/lifecycle.md); None before the first step."""
    if not any(plan.loaded for plan in plans):
        return None
    models = [{**asdict(p.graphs[name].model), "core": p.core} for p in plans for name in sorted(p.loaded)]
    cores = [{"core": p.core, "memory": p.memory, "peak": p.peak} for p in plans]
    return {"cores": cores, "models": models}


def _holding(plan: RankPlan, graph: GraphEntry, counts: CompileCacheCounter) -> Holding:
    memory = MemoryReport(core=CoreMemory(**plan.memory), peak=plan.peak)
    return Holding(model=graph.model, compile_cache=counts.reported(), memory=memory)


def _executions(
    plan: RankPlan, step: int, step_start: float, counts: CompileCacheCounter, faults: CoreFaults = NO_FAULTS
) -> tuple[list[Execution], float]:
    """The step's executions, and how much longer than planned the step takes on this rank
    (``counts``: the process's compile-cache counts, all its ranks). ``faults`` (docs/faults.md):
    on a slow core, or over a cut EFA link, every execution takes longer and the executions after
    it start that much later (the gaps between them, host time and waits, stay as planned)."""
    executions = []
    delay = 0.0
    for slot in plan.slots(first=step == 1):
        graph = plan.graphs[slot.graph]
        if slot.graph in plan.loaded:
            counts.count(hit=True)  # in-memory JIT cache: the NEFF is loaded
        else:
            plan.loaded.add(slot.graph)
            counts.count(hit=plan.cached)
        ex = execution(plan.core, step_start + slot.start + delay, graph.work, _holding(plan, graph, counts), faults)
        executions.append(ex)
        delay += ex.device_seconds - graph.work.device_seconds
    return executions, delay


def batches(bodies: list[dict[str, Any]], limit: int = REPLAY_BATCH_BYTES) -> Iterator[list[dict[str, Any]]]:
    """A step's executions in posts of at most ``limit`` bytes of JSON each: the daemon refuses
    bodies over 1 MiB (docs/fuzzing.md), and a pipeline step with many micro-batches is more."""
    base = len('{"executions": []}')
    post: list[dict[str, Any]] = []
    size = base
    for body in bodies:
        n = len(json.dumps(body)) + 2  # with the ", " that joins it to the next
        if post and size + n > limit:
            yield post
            post, size = [], base
        post.append(body)
        size += n
    if post:
        yield post


def _post(
    session: RuntimeSession,
    executions: list[Execution],
    faults: dict[int, CoreFaults],
    on_answer: Callable[[dict[str, Any]], None] = lambda answer: None,
) -> dict[int, CoreFaults]:
    """Send the step's executions; training goes on without a daemon (docs/lifecycle.md).
    Returns the faults the daemon answered for each of the process's cores (``faults``: those
    known so far), which the ranks apply from their next step (docs/faults.md); ``on_answer``
    sees each answer (a profile request: docs/profiling.md)."""
    for post in batches([ex.to_wire() for ex in executions]):
        try:
            answer = session.client.post(f"/processes/{session.owner_pid}/executions/batch", {"executions": post})
        except DaemonUnavailable:
            session.suspect()
            return {}
        except DaemonError as exc:
            if exc.status == 404:  # a restarted daemon that does not know us (yet)
                session.suspect()
                return {}
            continue
        cores = faults or sorted({ex.core for ex in executions})
        faults = {core: CoreFaults.from_answer(answer, core) for core in cores}
        on_answer(answer)
    return faults


def _failed(
    session: RuntimeSession, plan: RankPlan, step: int, faults: CoreFaults, counts: CompileCacheCounter
) -> NeuronRuntimeError | None:
    """The armed uncorrectable ECC error fails the step's first execution: report it (counted in
    error_summary hardware) and return the runtime's error, which ends the rank; None when no
    failure is armed on the rank's core."""
    error = faults.hardware_failure(plan.core, f"step {step}")
    if error is None:
        return None
    first = plan.graphs[plan.slots(first=False)[0].graph]
    _post(session, [execution(plan.core, time.monotonic(), Work(), _holding(plan, first, counts), faults)], {})
    return NeuronRuntimeError(error.status, f"rank {plan.rank}: {error.message}")


def run(plans: list[RankPlan]) -> int:
    """Replay the steps of ``plans`` (this process's ranks: one, or a node's worth with
    ``--ranks-per-process``) in lockstep with the job (docs/multinode.md): after each step the
    process prints ``step N END`` (``time.monotonic()`` when the last of its ranks ended it) and
    waits for the launcher's ``go START`` — the job-wide end of the step — or ``abort WHY``: a
    peer is lost, and the ranks' next collective times out."""
    session = attach()
    counts = CompileCacheCounter()  # the process's compile-cache counts, all its ranks
    session.set_resume(lambda: _resume(plans))
    session.on_register(counts.registered)
    print("ready", flush=True)
    line = _wait_line(session, deadline=None)
    if line is None:
        return 0
    if line.startswith("abort"):  # another node could not start its ranks
        raise NeuronRuntimeError("NRT_TIMEOUT", f"{_who(plans)}: the job did not start: {line[5:].strip()}")
    profile = RankProfile(session, plans, os.environ)
    try:
        return _steps(session, plans, counts, float(line), profile)
    finally:
        profile.close()


def _steps(
    session: RuntimeSession, plans: list[RankPlan], counts: CompileCacheCounter, t0: float, profile: RankProfile
) -> int:
    """The job's steps from its start ``t0`` (see :func:`run`)."""
    first = plans[0]
    start = t0 + first.compile_seconds  # every rank waits for the slowest stage's compile
    faults: dict[int, CoreFaults] = {}
    for step in range(1, first.steps + 1):
        for plan in plans:
            failure = _failed(session, plan, step, faults.get(plan.core, NO_FAULTS), counts)
            if failure is not None:
                raise failure
        profile.step_begins(step)
        length = first.first_step_seconds if step == 1 else first.step_seconds
        executions: list[Execution] = []
        delay = 0.0
        for plan in plans:
            mine, late = _executions(plan, step, start, counts, faults.get(plan.core, NO_FAULTS))
            executions += mine
            delay = max(delay, late)
        used, faults = faults, _post(session, executions, faults, profile.on_answer)
        profile.executed(step, executions, used)
        end = start + length + delay
        heard = _sleep_listening(session, end)
        if heard is None:
            print(f"step {step} {end!r}{profile.end_line()}", flush=True)
            profile.step_ends(step, start, end)  # while the launcher gathers the ranks' ends
            if step == first.steps:
                break
            heard = _wait_line(session, deadline=None) or ""
        if not heard:
            return 0  # the launcher is gone
        word, _, rest = heard.strip().partition(" ")
        if word == "abort":
            raise _timed_out(session, plans, step + 1, rest, counts)
        start = max(end, float(rest))
    return 0


def _who(plans: list[RankPlan]) -> str:
    ranks = [p.rank for p in plans]
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}"


def _timed_out(
    session: RuntimeSession, plans: list[RankPlan], step: int, why: str, counts: CompileCacheCounter
) -> NeuronRuntimeError:
    """A peer is gone: each rank's next step blocks in its first collective until the runtime's
    timeout; the executions are reported ``timed_out`` (error_summary ``runtime``) and the process
    ends with the runtime's error."""
    now = time.monotonic()
    executions = [
        execution(p.core, now, Work(), _holding(p, p.graphs[p.slots(first=False)[0].graph], counts), peer_lost=True)
        for p in plans
    ]
    _post(session, executions, {})
    cores = [p.core for p in plans]
    where = f"nc{cores[0]}" if len(cores) == 1 else f"nc{cores[0]}-nc{cores[-1]}"
    return NeuronRuntimeError("NRT_TIMEOUT", f"{_who(plans)}: step {step} on {where}: a collective timed out: {why}")


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # SIGTERM when the launcher dies, also by kill -9 (docs/lifecycle.md)
    die_with_parent(signal.SIGTERM, parent=launcher_pid())
    path = os.environ.get(JOB_PLAN_ENV, "")
    rank = int(os.environ.get("RANK", "0"))
    try:
        # RANKS: the ranks this process drives (--ranks-per-process), RANK the first of them
        ranks = [int(r) for r in os.environ.get(RANKS_ENV, str(rank)).split(",")]
        return run([load_rank_plan(path, r) for r in ranks])
    except NeuronRuntimeError as exc:
        print(ERROR_PREFIX + str(exc), file=sys.stderr, flush=True)
        return 1
    except (OSError, ValueError) as exc:
        print(f"{ERROR_PREFIX}rank {rank}: cannot read the job plan {path!r}: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        detach()


if __name__ == "__main__":
    sys.exit(main())
