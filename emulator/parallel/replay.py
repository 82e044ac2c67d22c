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
from collections.abc import Iterator
from typing import Any

from emulator.lifecycle import die_with_parent, launcher_pid
from emulator.parallel.plan_file import JOB_PLAN_ENV, RANKS_ENV, RankPlan, load_rank_plan
from emulator.runtime.attach import RuntimeSession, attach, detach
from emulator.runtime.errors import NeuronRuntimeError
from emulator.runtime.faults import NO_FAULTS, CoreFaults, failed_execution
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
    models = [{**p.graphs[name].model, "core": p.core} for p in plans for name in sorted(p.loaded)]
    cores = [{"core": p.core, "memory": p.memory, "peak": p.peak} for p in plans]
    return {"cores": cores, "models": models}


def _bodies(
    plan: RankPlan,
    step: int,
    step_start: float,
    counters: dict[str, int],
    base: dict[str, int] | None = None,
    faults: CoreFaults = NO_FAULTS,
) -> tuple[list[dict[str, Any]], float]:
    """The step's executions, and how much longer than planned the step takes on this rank;
    ``base``: compile-cache counts when a restarted daemon registered this rank again (its
    counters start from zero). ``faults`` (docs/faults.md): on a slow core every execution takes
    ``slow_factor`` x its device time and the executions after it start that much later (the
    gaps between them, host time and waits, stay as planned)."""
    base = base or {"hits": 0, "misses": 0}
    bodies = []
    delay = 0.0
    for slot in plan.slots(first=step == 1):
        graph = plan.graphs[slot.graph]
        if slot.graph in plan.loaded:
            counters["hits"] += 1  # in-memory JIT cache: the NEFF is loaded
        else:
            plan.loaded.add(slot.graph)
            counters["hits" if plan.cached else "misses"] += 1
        device_seconds = (graph.device_seconds + efa_extra(graph.collectives, faults)) * faults.slow_factor
        bodies.append(
            {
                "core": plan.core,
                "start": step_start + slot.start + delay,
                "device_seconds": device_seconds,
                "compute_seconds": device_seconds,  # the NEFF runs on the core all along
                "total_latency": graph.host_seconds + device_seconds,
                "flops": graph.flops,
                "engines": {e: s * faults.slow_factor for e, s in graph.engines.items()},
                "outcome": faults.outcome("completed"),
                "model": graph.model,
                "compile_cache": {k: counters[k] - base[k] for k in ("hits", "misses")},
                "collectives": graph.collectives,
                "memory": {"core": plan.memory, "peak": plan.peak},
            }
        )
        delay += device_seconds - graph.device_seconds
    return bodies, delay


def efa_extra(collectives: list[dict[str, Any]], faults: CoreFaults) -> float:
    """The extra time of a graph's inter-node collectives when the node's EFA bandwidth is cut to
    ``efa_bandwidth_factor`` (docs/faults.md): a collective that spans nodes is bound by its EFA
    hop, so it takes 1/factor as long."""
    factor = faults.efa_bandwidth_factor
    if factor >= 1.0:
        return 0.0
    spans = (float(c.get("seconds", 0.0)) * int(c.get("count", 1)) for c in collectives if int(c.get("nodes", 1)) > 1)
    return sum(spans) * (1.0 / factor - 1.0)


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
    session: RuntimeSession, bodies: list[dict[str, Any]], faults: dict[int, CoreFaults]
) -> dict[int, CoreFaults]:
    """Send the step's executions; training goes on without a daemon (docs/lifecycle.md).
    Returns the faults the daemon answered for each of the process's cores (``faults``: those
    known so far), which the ranks apply from their next step (docs/faults.md)."""
    for post in batches(bodies):
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
        faults = {core: CoreFaults.from_answer(answer, core) for core in faults or _cores(bodies)}
    return faults


def _cores(bodies: list[dict[str, Any]]) -> list[int]:
    return sorted({int(b["core"]) for b in bodies})


def _fail(
    session: RuntimeSession, plan: RankPlan, error: NeuronRuntimeError, compile_cache: dict[str, int]
) -> NeuronRuntimeError:
    """The step's first execution hit the armed uncorrectable ECC error: report it (counted in
    error_summary hardware) and return the runtime's error, which ends the rank. ``compile_cache``:
    the counts the daemon holds (they never go back)."""
    now = time.monotonic()
    first = plan.graphs[plan.slots(first=False)[0].graph]
    base = {
        "model": first.model,
        "compile_cache": compile_cache,
        "memory": {"core": plan.memory, "peak": plan.peak},
    }
    _post(session, [failed_execution(plan.core, now, 0.0, base)], {})
    return NeuronRuntimeError(error.status, f"rank {plan.rank}: {error.message}")


def run(plans: list[RankPlan]) -> int:
    """Replay the steps of ``plans`` (this process's ranks: one, or a node's worth with
    ``--ranks-per-process``) in lockstep with the job (docs/multinode.md): after each step the
    process prints ``step N END`` (``time.monotonic()`` when the last of its ranks ended it) and
    waits for the launcher's ``go START`` — the job-wide end of the step — or ``abort WHY``: a
    peer is lost, and the ranks' next collective times out."""
    session = attach()
    counters = {"hits": 0, "misses": 0}  # the process's compile-cache counts, all its ranks
    base = {"hits": 0, "misses": 0}
    session.set_resume(lambda: _resume(plans))
    session.on_register(lambda: base.update(counters))
    print("ready", flush=True)
    line = _wait_line(session, deadline=None)
    if line is None:
        return 0
    if line.startswith("abort"):  # another node could not start its ranks
        raise NeuronRuntimeError("NRT_TIMEOUT", f"{_who(plans)}: the job did not start: {line[5:].strip()}")
    t0 = float(line)
    first = plans[0]
    start = t0 + first.compile_seconds  # every rank waits for the slowest stage's compile
    faults: dict[int, CoreFaults] = {}
    for step in range(1, first.steps + 1):
        for plan in plans:
            failure = faults.get(plan.core, NO_FAULTS).hardware_failure(plan.core, f"step {step}")
            if failure is not None:
                raise _fail(session, plan, failure, {k: counters[k] - base[k] for k in ("hits", "misses")})
        length = first.first_step_seconds if step == 1 else first.step_seconds
        bodies: list[dict[str, Any]] = []
        delay = 0.0
        for plan in plans:
            mine, late = _bodies(plan, step, start, counters, base, faults.get(plan.core, NO_FAULTS))
            bodies += mine
            delay = max(delay, late)
        faults = _post(session, bodies, faults)
        end = start + length + delay
        heard = _sleep_listening(session, end)
        if heard is None:
            print(f"step {step} {end!r}", flush=True)
            if step == first.steps:
                break
            heard = _wait_line(session, deadline=None) or ""
        if not heard:
            return 0  # the launcher is gone
        word, _, rest = heard.strip().partition(" ")
        if word == "abort":
            compile_cache = {k: counters[k] - base[k] for k in ("hits", "misses")}
            raise _timed_out(session, plans, step + 1, rest, compile_cache)
        start = max(end, float(rest))
    return 0


def _who(plans: list[RankPlan]) -> str:
    ranks = [p.rank for p in plans]
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}"


def _timed_out(
    session: RuntimeSession, plans: list[RankPlan], step: int, why: str, compile_cache: dict[str, int]
) -> NeuronRuntimeError:
    """A peer is gone: each rank's next step blocks in its first collective until the runtime's
    timeout; the executions are reported ``timed_out`` (error_summary ``runtime``) and the process
    ends with the runtime's error."""
    now = time.monotonic()
    bodies = []
    for plan in plans:
        first = plan.graphs[plan.slots(first=False)[0].graph]
        body = {
            **failed_execution(plan.core, now, 0.0, {"model": first.model, "compile_cache": compile_cache}),
            "outcome": "timed_out",
            "memory": {"core": plan.memory, "peak": plan.peak},
        }
        body.pop("error", None)
        bodies.append(body)
    _post(session, bodies, {})
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
