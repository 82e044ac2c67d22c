"""One compiled graph run on its own and profiled, as ``neuron-profile capture -n NEFF`` runs a NEFF
(docs/profiling.md): ``neuron-emulator profile-graph GRAPH --num-exec N --profile-nth-exec K``.

The graph comes from the persistent compile cache (``compile_cache.py``: a graph is stored with
its op records), found by its hash or a prefix of it. It is costed as a training process costs it
(the cost model, the options of ``NEURON_CC_FLAGS``), the process attaches to the daemon and holds
one free NeuronCore, and runs the graph ``N`` times back to back at the cost model's pace, each
execution reported like any runtime process's (neuron-top shows it; a slow-core fault applies from
the execution after the daemon answered it). The ``K``-th is profiled into ``DIR/<instance-id>_pid_<pid>/``:
the graph's schedule file, its device profile (that one execution), and the system trace of all
``N``. A standalone NEFF has no peers: its collectives, if any, are not run (the real tool needs
``--collectives-worker-count`` workers for them).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from emulator.costmodel import compile_cost, cost_graph, options_from_env
from emulator.profile.graphs import graph_schedule
from emulator.profile.info import trace_info
from emulator.profile.records import profiled_execution
from emulator.profile.writer import ProcessProfile
from emulator.runtime.attach import RuntimeSession, attach
from emulator.runtime.compile_cache import CompileCache, cache_settings, cached_graphs, read_ops
from emulator.runtime.execution import CompileCacheCounts, CoreMemory, Holding, MemoryReport, ModelRef, Work, execution
from emulator.runtime.faults import NO_FAULTS, CoreFaults
from neurontools.contract.profile import DeviceProfileHeader, GraphSchedule, InspectSettings, SystemEvent, TraceInfo
from neurontools.sources.daemon_client import DaemonClient


class GraphNotFound(ValueError):
    """No (or no single) replayable graph for the given hash: one line to show."""


@dataclass(frozen=True)
class Profiled:
    directory: Path  # the capture directory written
    graph_hash: str
    device_seconds: float  # one execution on a healthy core
    executions: int


def find_graph(prefix: str, env: Mapping[str, str]) -> tuple[str, GraphSchedule, int]:
    """The cached graph ``prefix`` names: its hash, its schedule (costed now) and its NEFF's bytes."""
    cache_dir, _ = cache_settings(env)
    if cache_dir is None:
        raise GraphNotFound("the persistent compile cache is off (NEURON_CC_FLAGS has --no_cache, or a remote URL)")
    found = cached_graphs(cache_dir, prefix)
    if not found:
        raise GraphNotFound(f"no graph {prefix!r} in the compile cache at {cache_dir}")
    if len(found) > 1:
        names = ", ".join(h[:16] for h in sorted(found)[:4])
        raise GraphNotFound(
            f"graph {prefix!r} is ambiguous in the compile cache: {names}{', ...' if len(found) > 4 else ''}"
        )
    ((digest, module),) = found.items()
    ops = read_ops(module)
    if not ops:
        raise GraphNotFound(
            f"graph {digest[:16]} in {module} has no op records to replay (a model-scale job's graphs are "
            "cached without them)"
        )
    options = options_from_env(env)
    cost = cost_graph(ops, options)
    return (
        digest,
        graph_schedule(f"graph {digest[:20]}", digest, ops, cost, (), options),
        compile_cost(ops).model_code_bytes,
    )


def _trace_info(session: RuntimeSession, core: int) -> TraceInfo:
    status = session.client.get("/status")
    return trace_info(str(status["instance_id"]), str(status["instance_type"]), {core: 0})


def profile_graph(
    prefix: str, *, num_exec: int, profile_nth: int, output_dir: Path, env: Mapping[str, str] | None = None
) -> Profiled:
    """Run the cached graph ``num_exec`` times on a free NeuronCore of the daemon, profiling the
    ``profile_nth``-th (1-based). GraphNotFound, or the runtime's error (no daemon, no free core)."""
    env = os.environ if env is None else env
    if not 1 <= profile_nth <= num_exec:
        raise ValueError(f"--profile-nth-exec {profile_nth} is not one of the {num_exec} executions")
    digest, schedule, code_bytes = find_graph(prefix, env)
    DaemonClient(timeout=3.0).get("/status")  # no daemon: DaemonUnavailable, one line (before the runtime's log)
    cores = {} if "NEURON_RT_VISIBLE_CORES" in env or "NEURON_RT_NUM_CORES" in env else {"NEURON_RT_NUM_CORES": "1"}
    session = attach({**env, **cores, "NEURON_PROCESS_TAG": env.get("NEURON_PROCESS_TAG") or f"profile-{digest[:12]}"})
    core = session.neuroncores[0]
    cache_dir, flags = cache_settings(env)
    model = CompileCache(cache_dir, flags).load(digest, (), code_bytes).ref()
    settings = InspectSettings(enabled=True, output_dir=str(output_dir), device="session")
    profile = ProcessProfile(settings, _trace_info(session, core))
    try:
        _run(session, core, schedule, model, code_bytes, profile, num_exec, profile_nth)
    finally:
        profile.close()
    return Profiled(profile.directory, digest, schedule.compute_seconds, num_exec)


def _run(
    session: RuntimeSession,
    core: int,
    schedule: GraphSchedule,
    model: ModelRef,
    code_bytes: int,
    profile: ProcessProfile,
    num_exec: int,
    profile_nth: int,
) -> None:
    """The executions, back to back at the cost model's pace, each reported as it starts."""
    work = Work(device_seconds=schedule.compute_seconds, flops=schedule.flops, engines=schedule.busy)
    memory = MemoryReport(core=CoreMemory(0, code_bytes, 0, 0, 0), peak=code_bytes)
    faults: CoreFaults = NO_FAULTS
    header = DeviceProfileHeader(schedule.hash, schedule.name, core, model_id=model.model_id)
    profile.add_graph(schedule)
    start = time.monotonic()
    for number in range(1, num_exec + 1):
        session.raise_if_failed()
        holding = Holding(model=model, compile_cache=CompileCacheCounts(hits=number, misses=0), memory=memory)
        ex = execution(core, start, work, holding, faults)
        answer = session.client.post(f"/processes/{session.owner_pid}/executions", ex.to_wire())
        args = {"core": core, "graph": schedule.hash, "model_id": header.model_id, "outcome": ex.outcome}
        rt = f"neuron_rt/NC:{core}"
        profile.add_event(SystemEvent("nrt_execute", "nrt_execute", start, ex.total_latency, rt, core, args=args))
        if number == profile_nth:
            slow = faults.slow_factor
            profile.add_execution(
                header, profiled_execution(ex, step=1, number=number, host_seconds=0.0, slow_factor=slow)
            )
        failure = faults.hardware_failure(core, f"execution {number}")
        if failure is not None:  # an armed uncorrectable ECC error failed it (docs/faults.md)
            raise failure
        faults = CoreFaults.from_answer(answer, core)
        start += ex.device_seconds
        time.sleep(max(0.0, start - time.monotonic()))
