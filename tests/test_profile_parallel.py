"""Profiling a model-scale parallel job (docs/profiling.md §Parallel jobs, §Profiling a running
process): the smallest job with both TP and DP collectives (vit-base, TP2 x DP2 on a
trn1.32xlarge), under ``NEURON_RT_INSPECT_*`` and at the daemon's request; and the profile of the
first read back by neuron-profile against what ``neuron-emulator bench`` predicts for the same job."""

from __future__ import annotations

import json
import math
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from emulator.cli import build_parser
from emulator.cli.bench import plan_model
from emulator.hardware import get_instance_type
from emulator.parallel.job import JobPlan
from neurontools.contract.profile import (
    NTFF_NAME,
    TRACE_INFO,
    GraphSchedule,
    ProfiledExecution,
    read_device_profile,
    read_graph,
    read_system_trace,
    read_trace_info,
)
from neurontools.profile import summary
from neurontools.profile.build import Timeline, build
from neurontools.profile.load import load
from neurontools.profile.tracks import COMPUTE_ENGINES, DMA, STEP
from tests.support import BIN, reap, run_tool, start_daemon, tool_env, wait_until

JOB = ["vit-base", "--tp", "2", "--dp", "2", "--micro-batch", "2"]
SLOW_CORE = 1  # the capture's slow fault (2x): every other core runs at the plan's pace


@dataclass(frozen=True)
class Inspected:
    """The job run for 3 steps under NEURON_RT_INSPECT_* (device profile ``session``), with a 2x
    slow fault on core 1; ``plan`` and ``row``: the same job planned by ``bench``."""

    out: Path
    plan: JobPlan
    row: dict[str, Any]


@pytest.fixture(scope="module")
def inspected() -> Iterator[Inspected]:
    """One profiled run shared by the tests of this module (module scope: its own daemon and
    directory, not the function-scoped ``daemon_factory``)."""
    args = build_parser().parse_args(["bench", *JOB, "--json"])
    plan, row = plan_model(args, get_instance_type(args.instance_type))
    row = json.loads(json.dumps(row))  # what `neuron-emulator bench ... --json` prints
    tmp = Path(tempfile.mkdtemp(prefix="nt-", dir="/tmp"))  # short: the daemon's Unix socket
    daemon = start_daemon(tmp, "trn1.32xlarge")
    try:
        daemon.client.post("/faults", {"kind": "slow", "factor": 2.0, "core": SLOW_CORE})
        out = tmp / "profiles"
        env = tool_env(
            daemon.address,
            {
                "NEURON_COMPILE_CACHE_URL": str(tmp / "cache"),
                "NEURON_RT_INSPECT_ENABLE": "1",
                "NEURON_RT_INSPECT_OUTPUT_DIR": str(out),
                "NEURON_RT_INSPECT_DEVICE_PROFILE": "session",
            },
        )
        proc = _run(env, "3")
        try:
            _, err = proc.communicate(timeout=240)
        finally:
            reap(proc)
        assert proc.returncode == 0, err
        yield Inspected(out, plan, row)
    finally:
        daemon.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _run(env: dict[str, str], steps: str) -> subprocess.Popen[str]:
    argv = [str(BIN / "neuron-emulator"), "run", *JOB, "--steps", steps]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _op_table_busy(graph: GraphSchedule) -> dict[str, float]:
    busy: dict[str, float] = {}
    for engine, start, end in zip(graph.ops.engine, graph.ops.start, graph.ops.end, strict=True):
        busy[engine] = busy.get(engine, 0.0) + (end - start)
    return busy


def _check_linked_across_ranks(trace: dict[str, Any], ranks: int) -> None:
    """One process per rank in the merged trace, and collectives linked by flows between them."""
    events = trace["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    busy = {e["pid"] for e in events if e["ph"] == "X" and e.get("cat") == "kernel"}
    assert len(busy) == ranks, names
    starts = {e["id"]: e["pid"] for e in events if e["ph"] == "s"}
    ends = {e["id"]: e["pid"] for e in events if e["ph"] == "f"}
    assert starts and starts.keys() == ends.keys()
    assert all(starts[i] != ends[i] for i in starts)  # each flow goes from one rank's process to another's
    assert {starts[i] for i in starts} | {ends[i] for i in ends} == busy  # every rank takes part


def _device_profiles(directory: Path) -> dict[tuple[str, int], tuple]:
    return {
        (m["hash"], int(m["core"])): read_device_profile(path)
        for path in directory.iterdir()
        if (m := NTFF_NAME.match(path.name)) is not None
    }


def _check_engines(record: ProfiledExecution, graph: GraphSchedule) -> None:
    """The execution's engine time is the schedule's op table, stretched by the slow factor."""
    for engine, seconds in _op_table_busy(graph).items():
        assert math.isclose(record.engines[engine], seconds * record.slow_factor, rel_tol=1e-9), engine


def test_inspect_variables_write_one_capture_per_rank(inspected: Inspected) -> None:
    out, plan = inspected.out, inspected.plan
    planned = {g.graph_hash: g for g in plan.stages[0].program.graphs.values()}
    dirs = sorted(out.iterdir())
    assert len(dirs) == 4  # one per rank process
    seen_ranks = set()
    for directory in dirs:
        info = read_trace_info(directory / TRACE_INFO)
        assert info.world_size == 4 and info.pid == int(directory.name.rsplit("_", 1)[1])
        ((core, rank),) = info.ranks.items()
        seen_ranks.add(rank)
        profiles = _device_profiles(directory)
        assert {h for h, _ in profiles} == set(planned)  # every graph, with its schedule file
        for (graph_hash, core_id), (header, records) in profiles.items():
            graph = read_graph(directory / f"neff_{graph_hash}.neff")
            assert (header.rank, header.core, header.world_size, header.node) == (rank, int(core), 4, 0)
            assert len(header.collectives) == len(graph.collectives) == len(planned[graph_hash].collectives)
            for placement, call in zip(header.collectives, graph.collectives, strict=True):
                group = (0, 1) if rank < 2 else (2, 3)
                if call.group == "dp":
                    group = (rank % 2, rank % 2 + 2)
                assert placement.ranks == group and placement.cores == group, (call, placement)
                assert placement.algorithm == "ring" and placement.seconds > 0 and placement.bus_bandwidth > 0
            for record in records:
                _check_engines(record, graph)
                # a healthy core runs at the plan's pace, the slow core 2x (from the step after it heard)
                slow = 2.0 if core_id == SLOW_CORE and record.step > 1 else 1.0
                assert record.slow_factor == slow
                healthy = planned[graph_hash].compute_seconds + sum(
                    c.seconds for c in plan.stages[0].collectives[header.graph_name]
                )
                assert math.isclose(record.device_seconds, healthy * slow, rel_tol=1e-9)
        events = read_system_trace(directory / "ntrace.jsonl")
        steps = [e.name for e in events if e.kind == "step"]
        assert steps == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
        executions = [e for e in events if e.kind == "nrt_execute"]
        assert len(executions) == sum(len(records) for _, records in profiles.values())
    assert seen_ranks == {0, 1, 2, 3}


def _step_span(timeline: Timeline, pid: int, step: int) -> float:
    """The step's ``ProfilerStep#N`` in the process's system trace: the step on the job's lockstep
    timeline (emulator/parallel/replay.py: from the step's common start to this rank's end of it)."""
    (span,) = (s for s in timeline.slices if s.kind == STEP and s.track.pid == pid and s.args.get("step") == step)
    return span.seconds


def test_a_steady_step_of_the_profile_is_what_bench_predicts(inspected: Inspected) -> None:
    """``bench``'s ``engine_share[e]`` (JobPlan.engine_share, stage 0) is the sum, over the graph
    executions of a steady step on a core (the plan's timeline slots: ``micro_step`` then
    ``optimizer``), of each graph's engine busy seconds (the cost model's), divided by the planned
    ``step_seconds``. The like from the profile, for step 2 (steady: step 1 runs
    ``optimizer_first``) on each healthy rank: the sum, over that rank's profiled executions of
    step 2, of its neuron-profile summary record's ``<engine>_engine_active_time``
    (``dma_active_time`` for DMA: the sum of the engine's op slices), divided by the step's span
    ``ProfilerStep#2``. Equal to 1e-6 relative, every engine. And each execution's record on its
    own has ``total_time`` = its ``device_seconds`` = its planned slot (compute + collectives)."""
    plan, share = inspected.plan, inspected.row["engine_share"]
    assert set(share) == {*COMPUTE_ENGINES, DMA}
    slots = plan.timeline.stages[0].slots
    timeline = build(load(str(inspected.out)))
    healthy = [lay for lay in timeline.executions if lay.ref.core != SLOW_CORE and lay.execution.step == 2]
    assert {lay.rank for lay in healthy} == {0, 2, 3}
    for rank in (0, 2, 3):
        lays = sorted((lay for lay in healthy if lay.rank == rank), key=lambda lay: lay.start)
        assert [lay.graph.name for lay in lays] == [slot.graph for slot in slots]
        records = [summary.record([lay]) for lay in lays]
        for lay, one, slot in zip(lays, records, slots, strict=True):
            assert one["total_time"] == lay.execution.device_seconds
            assert math.isclose(one["total_time"], slot.end - slot.start, rel_tol=1e-9)
        step = _step_span(timeline, lays[0].ref.pid, 2)
        assert math.isclose(step, plan.step_seconds, rel_tol=1e-6)
        for engine in (*COMPUTE_ENGINES, DMA):
            key = f"{DMA}_active_time" if engine == DMA else f"{engine}_engine_active_time"
            profiled = sum(r[key] for r in records) / step
            assert math.isclose(profiled, share[engine], rel_tol=1e-6), (rank, engine, profiled, share[engine])


def test_the_summary_of_the_job_has_its_collective_groups(inspected: Inspected) -> None:
    """summary-json's ``collective_groups``: one row per graph, call and replica group; the slow
    core's rank is the slowest of its groups from the step after the fault reached it."""
    timeline = build(load(str(inspected.out)))
    doc = summary.summary_document(timeline)
    assert len(doc["summary"]) == 4 * 3  # ranks x graphs
    graphs = inspected.plan.stages[0].program.graphs
    expected = sum(2 * len(g.collectives) for g in graphs.values())  # two groups of each kind (tp, dp)
    rows = doc["collective_groups"]
    assert len(rows) == expected
    for row in rows:
        assert row["ranks_profiled"] == 2 and len(row["replica_group"]) == 2
        if SLOW_CORE in row["replica_group"] and row["graph_name"] != "optimizer_first":
            assert row["slowest_rank"] == SLOW_CORE and row["ratio_to_median"] > 1.0
        else:
            assert row["ratio_to_median"] == pytest.approx(1.0)


def test_a_running_job_is_profiled_at_the_daemons_request(daemon_factory, short_tmp: Path) -> None:
    daemon = daemon_factory("trn1.32xlarge")
    env = tool_env(daemon.address, {"NEURON_COMPILE_CACHE_URL": str(short_tmp / "cache")})
    proc = _run(env, "1000000")
    client = daemon.client
    out = short_tmp / "capture"
    try:
        assert wait_until(lambda: len(daemon.processes()) == 4, timeout=180), proc.stderr
        target = next(p for p in daemon.processes() if p["neuroncores"] == [3])
        pid = target["pid"]
        assert wait_until(lambda: client.get(f"/processes/{pid}/memory")["cores"], timeout=60)  # stepping
        asked = client.post(f"/processes/{pid}/profile", {"steps": 4, "output_dir": str(out)})
        assert asked["state"] == "pending"
        assert wait_until(lambda: client.get(f"/processes/{pid}/profile")["state"] == "done", timeout=60)
        state = client.get(f"/processes/{pid}/profile")
        snapshot = client.get("/snapshot?latencies_since=0")
        # as a user does it: the launcher's PID (its rank processes are profiled), one merged trace
        merged, trace = short_tmp / "merged", short_tmp / "job.pt.trace.json"
        argv = ["neuron-profile", "capture", "--pid", str(proc.pid), "--steps", "2", "-o", str(merged)]
        captured = run_tool(argv, daemon.address, timeout=120)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        reap(proc)
    assert captured.returncode == 0, captured.stderr
    argv = ["neuron-profile", "view", "-d", str(merged), "--output-format", "chrome-json", "--output-file", str(trace)]
    viewed = run_tool(argv, None, timeout=120)
    assert viewed.returncode == 0, viewed.stderr
    _check_linked_across_ranks(json.loads(trace.read_text()), ranks=4)
    (directory,) = (Path(d) for d in state["dirs"])
    assert directory.parent == out and directory.name.endswith(f"_pid_{pid}")
    profiles = _device_profiles(directory)
    assert profiles and all(core == 3 for _, core in profiles)
    posted = next(p for p in snapshot["processes"] if p["pid"] == pid)["latencies"]
    device = {round(d, 12) for _, _, d in posted}
    steps = set()
    for (graph_hash, _), (header, records) in profiles.items():
        graph = read_graph(directory / f"neff_{graph_hash}.neff")  # copied from the job's directory
        assert header.rank == 3
        for record in records:
            steps.add(record.step)
            _check_engines(record, graph)
            assert round(record.device_seconds, 12) in device  # the very execution the daemon counted
    assert len(steps) == 4 and max(steps) - min(steps) == 3  # four consecutive steps, every execution
    events = read_system_trace(directory / "ntrace.jsonl")
    assert [e.name for e in events if e.kind == "step"] == [f"ProfilerStep#{s}" for s in sorted(steps)]
