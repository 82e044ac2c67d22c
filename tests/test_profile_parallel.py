"""Profiling a model-scale parallel job (docs/profiling.md §Parallel jobs, §Profiling a running
process): the smallest job with both TP and DP collectives (vit-base, TP2 x DP2 on a
trn1.32xlarge), under ``NEURON_RT_INSPECT_*`` and at the daemon's request."""

from __future__ import annotations

import math
import signal
import subprocess
from pathlib import Path

from emulator.hardware import get_instance_type
from emulator.parallel.runner import JobRequest, plan_request
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
from tests.support import BIN, reap, tool_env, wait_until

JOB = ["vit-base", "--tp", "2", "--dp", "2", "--micro-batch", "2"]


def _run(env: dict[str, str], steps: str) -> subprocess.Popen[str]:
    argv = [str(BIN / "neuron-emulator"), "run", *JOB, "--steps", steps]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _op_table_busy(graph: GraphSchedule) -> dict[str, float]:
    busy: dict[str, float] = {}
    for engine, start, end in zip(graph.ops.engine, graph.ops.start, graph.ops.end, strict=True):
        busy[engine] = busy.get(engine, 0.0) + (end - start)
    return busy


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


def test_inspect_variables_write_one_capture_per_rank(daemon_factory, short_tmp: Path) -> None:
    daemon = daemon_factory("trn1.32xlarge")
    daemon.client.post("/faults", {"kind": "slow", "factor": 2.0, "core": 1})
    out = short_tmp / "profiles"
    env = tool_env(
        daemon.address,
        {
            "NEURON_COMPILE_CACHE_URL": str(short_tmp / "cache"),
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
    plan = plan_request(JobRequest(JOB[0], tp=2, dp=2, micro_batch=2), get_instance_type("trn1.32xlarge"))
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
                slow = 2.0 if core_id == 1 and record.step > 1 else 1.0
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
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        reap(proc)
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
