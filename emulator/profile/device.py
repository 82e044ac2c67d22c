"""The real-math executor's profiling (``emulator/runtime/executor.py``; docs/profiling.md §Capturing).

:class:`DeviceCapture` turns what one ``mark_step`` did into profile records, through the
process's :class:`~emulator.profile.session.Profiler`: the graph's schedule file (once per graph,
from the cost model's own op spans), a device-profile header per graph with its collectives'
placements, the very execution posted to the daemon, and the system events — ``nrt_execute``,
``compile`` / ``cache_hit``, host↔device transfers at their scheduled times, ``ProfilerStep#N``
and the process's CPU utilisation per step. Nothing here runs while the profiler is off.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from emulator.capture.ops import CollectiveRecord, OpRecord
from emulator.costmodel import CostOptions, GraphCost
from emulator.costmodel.topology import GroupCollectiveCost
from emulator.profile.graphs import graph_schedule
from emulator.profile.info import trace_info
from emulator.profile.records import Execution, profiled_execution
from emulator.profile.session import Done, Profiler
from neurontools.contract.profile import (
    CollectiveCall,
    CollectivePlacement,
    DeviceProfileHeader,
    GraphSchedule,
    SystemEvent,
    TraceInfo,
)

HOST_COPY = "/host_copy"  # the op table's rule suffix of a host <-> device transfer


@dataclass(frozen=True)
class CoreIdentity:
    """The NeuronCore the executions run on and the rank that drives it."""

    core: int  # on the instance
    rank: int = 0
    world_size: int = 1
    node: int = 0


@dataclass(frozen=True)
class Transfer:
    """A host <-> device transfer of a graph: where the schedule puts it on a healthy core."""

    kind: str  # host_to_device, device_to_host
    name: str
    start: float
    end: float
    bytes: int


@dataclass(frozen=True)
class Ran:
    """One ``mark_step``'s execution, as the executor knows it."""

    step: int
    digest: str
    name: str  # the loaded model's
    model_id: int
    called: float  # monotonic: mark_step was called (the host's part of the latency starts)
    cost: GraphCost
    ops: Callable[[], Sequence[OpRecord]]  # the graph's records (built again only when needed)
    collectives: Sequence[tuple[CollectiveRecord, GroupCollectiveCost]] = ()
    slow_factor: float = 1.0


def executor_trace_info(inventory: Mapping, who: CoreIdentity) -> TraceInfo:
    """The capture's trace info for a real-math process: the instance from the daemon's inventory."""
    instance = inventory.get("instance", {})
    return trace_info(
        str(instance.get("instance_id", "unknown")),
        str(instance.get("instance_type", "unknown")),
        {who.core: who.rank},
        who.world_size,
    )


class DeviceCapture:
    """The executor's profiling glue (module docstring)."""

    def __init__(
        self, profiler: Profiler, who: CoreIdentity, options: CostOptions, report: Callable[[Done], None]
    ) -> None:
        self.profiler = profiler
        self.who = who
        self.options = options
        self.report = report  # a finished daemon request, to the daemon
        self._schedules: dict[str, tuple[GraphSchedule, tuple[Transfer, ...]]] = {}
        self._headers: dict[str, DeviceProfileHeader] = {}
        self._numbers: dict[str, int] = {}
        self._cpu = _cpu_seconds()
        self._cpu_at = time.monotonic()

    @property
    def active(self) -> bool:
        return self.profiler.active

    def count(self, digest: str) -> int:
        """Executions of the graph on this core so far, this one included (always counted)."""
        number = self._numbers[digest] = self._numbers.get(digest, 0) + 1
        return number

    def _event(
        self,
        kind: str,
        name: str,
        ts: float,
        dur: float = 0.0,
        *,
        track: str,
        core: int | None = None,
        value: float | None = None,
        args: dict[str, object] | None = None,
    ) -> None:
        self.profiler.event(SystemEvent(kind, name, ts, dur, track, core, value, dict(args or {})))

    def compiled(self, digest: str, ops: int, ts: float, seconds: float, cache_hit: bool) -> None:
        """A new graph: its simulated compile, or the persistent cache's NEFF."""
        if not self.profiler.active:
            return
        args = {"graph": digest, "ops": ops}
        if cache_hit:
            self._event("cache_hit", f"cache hit {digest[:20]}", ts, track="neuron_rt", args=args)
        else:
            self._event("compile", f"compile {digest[:20]}", ts, seconds, track="neuron_rt", args=args)

    def executed(self, ex: Execution, ran: Ran) -> None:
        """The execution ``ex`` posted for ``ran``: its events, and its device profile where wanted."""
        number = self.count(ran.digest)
        if not self.profiler.active:
            return
        core = self.who.core
        track = f"neuron_rt/NC:{core}"
        args = {"core": core, "graph": ran.digest, "model_id": ran.model_id, "outcome": ex.outcome}
        self._event("nrt_execute", "nrt_execute", ran.called, ex.total_latency, track=track, core=core, args=args)
        schedule, transfers = self._schedule(ran)
        if ex.device_seconds > 0:
            f = ran.slow_factor
            for t in transfers:
                ts, dur = ex.start + t.start * f, (t.end - t.start) * f
                self._event(t.kind, t.name, ts, dur, track=track, core=core, args={"bytes": t.bytes})
        targets = self.profiler.targets(ran.digest, core)
        if not targets:
            return
        header = self._header(ran)
        record = profiled_execution(
            ex, step=ran.step, number=number, host_seconds=ex.start - ran.called, slow_factor=ran.slow_factor
        )
        for capture in targets:
            capture.add_graph(schedule)
            capture.add_execution(header, record)

    def _schedule(self, ran: Ran) -> tuple[GraphSchedule, tuple[Transfer, ...]]:
        known = self._schedules.get(ran.digest)
        if known is None:
            ops = ran.ops()
            calls = [
                CollectiveCall(len(ops) if r.after_op is None else r.after_op, r.kind, r.nbytes)
                for r, _ in ran.collectives
            ]
            schedule = graph_schedule(ran.name, ran.digest, ops, ran.cost, calls, self.options)
            known = self._schedules[ran.digest] = (schedule, _transfers(schedule))
        return known

    def _header(self, ran: Ran) -> DeviceProfileHeader:
        header = self._headers.get(ran.digest)
        if header is None:
            who = self.who
            placements = tuple(
                CollectivePlacement(
                    call=i,
                    ranks=tuple(r.ranks),
                    cores=tuple(r.cores),
                    link="efa" if cost.nodes > 1 else "neuronlink",
                    algorithm="ring",
                    bus_bandwidth=cost.bandwidth,
                    seconds=cost.seconds,
                )
                for i, (r, cost) in enumerate(ran.collectives)
            )
            header = self._headers[ran.digest] = DeviceProfileHeader(
                graph_hash=ran.digest,
                graph_name=ran.name,
                core=who.core,
                rank=who.rank,
                world_size=who.world_size,
                node=who.node,
                model_id=ran.model_id,
                collectives=placements,
            )
        return header

    def step_begins(self, step: int) -> None:
        self.profiler.step_begins(step)

    def step_ends(self, step: int, begin: float, end: float) -> None:
        """``ProfilerStep#N`` (the framework's host time from the previous ``mark_step``'s end to
        this one's) and the process's CPU use over it; then the daemon requests this step ended."""
        if not self.profiler.active:
            return
        track = f"framework/TID:{threading.get_native_id()}"
        self._event("step", f"ProfilerStep#{step}", begin, end - begin, track=track, args={"step": step})
        cpu, wall = _cpu_seconds(), end - self._cpu_at
        if wall > 0:
            self._event("cpu_util", "cpu_util", end, track="cpu", value=100.0 * (cpu - self._cpu) / wall)
        for done in self.profiler.step_ends(step):
            self.report(done)
        if self.profiler.active:  # the next step's CPU use is measured from here
            self._cpu, self._cpu_at = _cpu_seconds(), time.monotonic()

    def close(self) -> None:
        for done in self.profiler.abandon():
            self.report(done)
        self.profiler.close()


def _transfers(schedule: GraphSchedule) -> tuple[Transfer, ...]:
    ops = schedule.ops
    out = []
    for i, rule in enumerate(ops.rule):
        if rule.endswith(HOST_COPY):
            name = ops.name[i]
            kind = "host_to_device" if name.endswith("host_to_device") else "device_to_host"
            nbytes = ops.hbm_write[i] if kind == "host_to_device" else ops.hbm_read[i]
            out.append(Transfer(kind, name, ops.start[i], ops.end[i], nbytes))
    return tuple(out)


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system
