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
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from typing import Any

from emulator.parallel.plan_file import JOB_PLAN_ENV, RankPlan, load_rank_plan
from emulator.runtime.attach import attach, detach
from emulator.runtime.errors import NeuronRuntimeError
from neurontools.sources.daemon_client import DaemonError, DaemonUnavailable

ERROR_PREFIX = "neuron-emulator: error: "


def _wait_line(deadline: float | None) -> str | None:
    """A line from stdin (None at end of input or when the deadline passes first)."""
    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
    ready, _, _ = select.select([sys.stdin], [], [], timeout)
    if not ready:
        return None
    line = sys.stdin.readline()
    return line if line else None


def _stdin_closed(until: float) -> bool:
    """Sleep until ``until``; True as soon as stdin reaches its end (the launcher is gone)."""
    while True:
        remaining = until - time.monotonic()
        if remaining <= 0:
            return False
        ready, _, _ = select.select([sys.stdin], [], [], remaining)
        if ready and not sys.stdin.readline():
            return True


def _bodies(plan: RankPlan, step: int, step_start: float, counters: dict[str, int]) -> list[dict[str, Any]]:
    bodies = []
    for slot in plan.slots(first=step == 1):
        graph = plan.graphs[slot.graph]
        if slot.graph in plan.loaded:
            counters["hits"] += 1  # in-memory JIT cache: the NEFF is loaded
        else:
            plan.loaded.add(slot.graph)
            counters["hits" if plan.cached else "misses"] += 1
        bodies.append(
            {
                "core": plan.core,
                "start": step_start + slot.start,
                "device_seconds": graph.device_seconds,
                "compute_seconds": graph.device_seconds,  # the NEFF runs on the core all along
                "total_latency": graph.host_seconds + graph.device_seconds,
                "flops": graph.flops,
                "engines": graph.engines,
                "outcome": "completed",
                "model": graph.model,
                "compile_cache": dict(counters),
                "collectives": graph.collectives,
                "memory": {"core": plan.memory, "peak": plan.peak},
            }
        )
    return bodies


def run(plan: RankPlan) -> int:
    session = attach()
    print("ready", flush=True)
    line = _wait_line(deadline=None)
    if line is None:
        return 0
    t0 = float(line)
    counters = {"hits": 0, "misses": 0}
    start = t0 + plan.compile_seconds  # every rank waits for the slowest stage's compile
    for step in range(1, plan.steps + 1):
        length = plan.first_step_seconds if step == 1 else plan.step_seconds
        bodies = _bodies(plan, step, start, counters)
        with contextlib.suppress(DaemonError, DaemonUnavailable):  # training goes on without a daemon
            session.client.post(f"/processes/{session.owner_pid}/executions/batch", {"executions": bodies})
        start += length
        if _stdin_closed(start):
            return 0
    return 0


def _die_with_launcher() -> None:
    """Ask Linux for SIGTERM when the launcher dies (also covers ``kill -9`` of the launcher)."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    launcher = os.environ.get("NEURON_EMULATOR_LAUNCHER_PID", "")
    if launcher.isdigit() and os.getppid() != int(launcher):  # it died before prctl took effect
        sys.exit(143)


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    _die_with_launcher()
    path = os.environ.get(JOB_PLAN_ENV, "")
    rank = int(os.environ.get("RANK", "0"))
    try:
        plan = load_rank_plan(path, rank)
        return run(plan)
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
