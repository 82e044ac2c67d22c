"""A replay process's profile (docs/profiling.md §Parallel jobs): its ranks' executions as the
runtime's profiler writes them, under ``NEURON_RT_INSPECT_*`` or at the daemon's request.

The per-process profiler (``Profiler``: which capture directories want what) does the bookkeeping;
this module feeds it what a rank knows: each execution exactly as posted to the daemon
(``records.profiled_execution``), the device-profile header of each graph on each core (rank,
world size, node, core, and each collective's replica group — global ranks and NeuronCores from
the rank grid —, link, algorithm, bus bandwidth and healthy seconds from the job's collective
cost, all in the plan file), the system events (``nrt_execute`` per execution, ``ProfilerStep#N``
per step), and each graph's schedule file, copied from the job's directory once the launcher has
written it (``schedule_files.py``: the rank asks in its ``step N END`` line). Nothing here
runs while nobody profiles but one counter per execution; the work happens while the rank would
otherwise sleep until its step ends, so profiling keeps the planned timeline.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from emulator.parallel.plan_file import GraphEntry, RankPlan
from emulator.parallel.schedule_files import PROFILE_REQUEST
from emulator.profile.info import trace_info
from emulator.profile.records import profiled_execution
from emulator.profile.session import Done, Profiler
from emulator.runtime.attach import RuntimeSession
from emulator.runtime.execution import Execution
from emulator.runtime.faults import NO_FAULTS, CoreFaults
from neurontools.contract.profile import (
    CollectivePlacement,
    DeviceProfileHeader,
    SystemEvent,
    TraceInfo,
    neff_file,
)
from neurontools.sources.daemon_client import DaemonError, DaemonUnavailable

SCHEDULE_WAIT_S = 5.0  # at the end of a capture, how long to wait for a schedule file still being written


def placements(plan: RankPlan, graph: GraphEntry) -> tuple[CollectivePlacement, ...]:
    """Each collective call of ``graph`` as this rank runs it (healthy seconds, the ring's bus bandwidth)."""
    groups: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    out = []
    for call, (index, token) in enumerate(graph.calls):
        if token not in groups:
            ranks = tuple(plan.grid.group_of(token, plan.rank))
            groups[token] = ranks, tuple(plan.grid.place(r).core for r in ranks)
        ranks, cores = groups[token]
        c = graph.work.collectives[index]
        bandwidth = graph.bus_bandwidth[index] if index < len(graph.bus_bandwidth) else 0.0
        out.append(CollectivePlacement(call, ranks, cores, c.time_link, "ring", bandwidth, c.seconds))
    return tuple(out)


class RankProfile:
    """The profiling of one replay process's ranks (``plans``: one, or a node's worth)."""

    def __init__(self, session: RuntimeSession, plans: list[RankPlan], env: Mapping[str, str]) -> None:
        self.session = session
        self.plans = plans
        self.profiler = Profiler(env, self._info)  # ValueError: a NEURON_RT_INSPECT_* value refused
        self._numbers: Counter[tuple[str, int]] = Counter()
        self._headers: dict[tuple[str, int], DeviceProfileHeader] = {}
        self._wanted: dict[Path, set[str]] = {}  # capture directory -> graph hashes it needs
        self._finished: list[Done] = []  # daemon requests captured, waiting for their schedule files
        self._asked = self._told = False
        self._tid = threading.get_native_id()
        self._cpu = _cpu_seconds(), time.monotonic()

    def _info(self) -> TraceInfo:
        """Who writes: the instance (the daemon's status; one request, at the first capture)."""
        try:
            status = self.session.client.get("/status")
            instance_id, instance_type = str(status["instance_id"]), str(status["instance_type"])
        except (DaemonError, DaemonUnavailable, KeyError, TypeError):
            instance_id, instance_type = "i-unknown", "unknown"
        return trace_info(instance_id, instance_type, {p.core: p.rank for p in self.plans}, self.plans[0].grid.world)

    # -- the step ---------------------------------------------------------------------------------
    def on_answer(self, answer: Mapping[str, Any]) -> None:
        """An execution answer: a profile directive starts a capture with the next step."""
        self.profiler.on_answer(answer)
        if self.profiler.active:
            self._ask_for_schedules()

    def step_begins(self, step: int) -> None:
        self.profiler.step_begins(step)
        if self.profiler.active:
            self._ask_for_schedules()

    def _ask_for_schedules(self) -> None:
        self._asked = True

    def end_line(self) -> str:
        """What the step's ``step N END`` line says after its end time: `` profile`` once a capture
        is on (the launcher writes the graphs' schedule files, if it did not already under
        NEURON_RT_INSPECT_ENABLE=1). One line per step: the launcher reads the ranks' pipes line
        by line with ``select``, which does not see a second line already buffered."""
        if self._asked and not self._told:
            self._told = True
            return " " + PROFILE_REQUEST
        return ""

    def executed(self, step: int, executions: list[Execution], faults: Mapping[int, CoreFaults]) -> None:
        """The step's executions as posted (in plan order; ``faults``: those they were built with)."""
        rows = iter(executions)
        for plan in self.plans:
            for slot in plan.slots(first=step == 1):
                ex = next(rows)
                graph = plan.graphs[slot.graph]
                key = (graph.graph_hash, plan.core)
                self._numbers[key] += 1
                if self.profiler.active:
                    slow = faults.get(plan.core, NO_FAULTS).slow_factor
                    self._record(step, plan, slot.graph, ex, slow)

    def _record(self, step: int, plan: RankPlan, name: str, ex: Execution, slow: float) -> None:
        graph = plan.graphs[name]
        key = (graph.graph_hash, plan.core)
        for profile in self.profiler.targets(*key):
            header = self._headers.get(key)
            if header is None:
                header = self._headers[key] = DeviceProfileHeader(
                    graph_hash=graph.graph_hash,
                    graph_name=name,
                    core=plan.core,
                    rank=plan.rank,
                    world_size=plan.grid.world,
                    node=plan.node,
                    model_id=graph.model.model_id,
                    collectives=placements(plan, graph),
                )
            record = profiled_execution(
                ex, step=step, number=self._numbers[key], host_seconds=graph.work.host_seconds, slow_factor=slow
            )
            profile.add_execution(header, record)
            self._wanted.setdefault(profile.directory, set()).add(graph.graph_hash)
        host = graph.work.host_seconds
        args = {"core": plan.core, "graph": graph.graph_hash, "model_id": graph.model.model_id, "outcome": ex.outcome}
        args.update(name=name, step=step, rank=plan.rank)
        track = f"neuron_rt/NC:{plan.core}"
        event = SystemEvent(
            "nrt_execute", "nrt_execute", ex.start - host, ex.total_latency, track, plan.core, args=args
        )
        self.profiler.event(event)

    def step_ends(self, step: int, start: float, end: float) -> None:
        """The step's span; the schedule files written so far; report the captures finished."""
        self._report_finished(final=False)
        if not self.profiler.active:
            return
        track = f"framework/TID:{self._tid}"
        self.profiler.event(SystemEvent("step", f"ProfilerStep#{step}", start, end - start, track, args={"step": step}))
        cpu, now = _cpu_seconds(), time.monotonic()
        if now > self._cpu[1]:  # the process's CPU use since the last step's end
            value = 100.0 * (cpu - self._cpu[0]) / (now - self._cpu[1])
            self.profiler.event(SystemEvent("cpu_util", "cpu_util", end, track="cpu", value=value))
        self._cpu = cpu, now
        self._copy_schedules(wait=0.0)
        self._finished.extend(self.profiler.step_ends(step))
        self._report_finished(final=False)

    def _report_finished(self, *, final: bool) -> None:
        """Report the finished captures whose schedule files are all copied. Never waits on the
        step's path: a capture whose files the launcher is still writing is reported after a later
        step; at the end (``final``) it waits up to SCHEDULE_WAIT_S, then reports what is missing."""
        waiting: list[Done] = []
        for request, dirs, error in self._finished:
            missing = self._copy_schedules(wait=SCHEDULE_WAIT_S if final else 0.0, only={Path(d) for d in dirs})
            if missing and error is None and not final:
                waiting.append((request, dirs, error))
                continue
            if error is None and missing:
                error = f"schedule files of {missing} graph(s) were not written in time"
            self._report(request, dirs, error)
        self._finished = waiting

    def _copy_schedules(self, *, wait: float, only: set[Path] | None = None) -> int:
        """Copy each wanted schedule file the launcher has written; how many are still missing
        (after waiting up to ``wait`` seconds for them)."""
        source = Path(self.plans[0].profile_dir)
        deadline = time.monotonic() + wait
        while True:
            missing = 0
            for directory, hashes in self._wanted.items():
                if only is not None and directory not in only:
                    continue
                for h in sorted(hashes):
                    src = source / neff_file(h)
                    if src.exists():
                        shutil.copyfile(src, directory / neff_file(h))
                        hashes.discard(h)
                    else:
                        missing += 1
            if not missing or time.monotonic() >= deadline:
                return missing
            time.sleep(0.02)

    def _report(self, request: int, dirs: list[str], error: str | None) -> None:
        """Tell the daemon a capture it asked for is done (docs/profiling.md)."""
        body = {"id": request, "dirs": dirs, "error": error}
        with contextlib.suppress(DaemonError, DaemonUnavailable):  # a restarted daemon forgot the request
            self.session.client.post(f"/processes/{self.session.owner_pid}/profile/done", body)

    def close(self) -> None:
        """The process ends: requests still open are reported failed (with what was captured)."""
        if self.profiler.active:
            self._copy_schedules(wait=SCHEDULE_WAIT_S)
        self._report_finished(final=True)
        for request, dirs, error in self.profiler.abandon():
            self._report(request, dirs, error)
        self.profiler.close()


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system
