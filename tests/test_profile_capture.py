"""Profile capture in the emulated runtime (docs/profiling.md §Capturing): the per-process
``Profiler`` on its own, then real processes under ``NEURON_RT_INSPECT_*`` against a daemon."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator.profile.session import Profiler
from neurontools.contract.profile import (
    DeviceProfileHeader,
    ProfiledExecution,
    SystemEvent,
    TraceInfo,
    read_device_profile,
    read_graph,
    read_system_trace,
    read_trace_info,
)
from tests.support import one_clear_line, run_tool

INFO = TraceInfo(
    instance_id="i-0123",
    instance_type="trn1.2xlarge",
    pid=4242,
    hostname="host",
    clock_monotonic=100.0,
    clock_epoch=1.7e9,
    device_profile="model",
    system_profile=True,
)
SAMPLES = Path(__file__).parent / "samples"
HEADER = DeviceProfileHeader(graph_hash="abc", graph_name="g", core=0)


def _execution(step: int) -> ProfiledExecution:
    return ProfiledExecution(step, 1, 0.0, 0.001, 0.0, "completed", 10, {"tensor": 0.001})


def _event(core: int | None, ts: float = 1.0) -> SystemEvent:
    return SystemEvent("nrt_execute", "nrt_execute", ts, 0.001, "neuron_rt/NC:0", core)


def _profiler(tmp: Path, **env: str) -> Profiler:
    return Profiler({"NEURON_RT_INSPECT_ENABLE": "1", "NEURON_RT_INSPECT_OUTPUT_DIR": str(tmp), **env}, lambda: INFO)


# --- the Profiler ---------------------------------------------------------------------------------


def test_off_by_default_and_builds_nothing() -> None:
    def never() -> TraceInfo:
        raise AssertionError("trace info built while off")

    profiler = Profiler({}, never)
    assert not profiler.active
    assert profiler.targets("abc", 0) == [] and profiler.step_ends(1) == []
    profiler.event(_event(0))


def test_model_mode_profiles_the_first_execution_of_each_graph_per_core(tmp_path: Path) -> None:
    profiler = _profiler(tmp_path)
    [capture] = profiler.targets("abc", 0)
    capture.add_execution(HEADER, _execution(1))
    assert profiler.targets("abc", 0) == []
    assert len(profiler.targets("abc", 1)) == 1 and len(profiler.targets("def", 0)) == 1
    session = _profiler(tmp_path / "s", NEURON_RT_INSPECT_DEVICE_PROFILE="session")
    for step in (1, 2):
        [capture] = session.targets("abc", 0)
        capture.add_execution(HEADER, _execution(step))
    profiler.close()
    session.close()
    _, executions = read_device_profile(capture.directory / "neff_abc_vnc_0.ntff")
    assert [e.step for e in executions] == [1, 2]
    assert read_trace_info(capture.directory / "trace_info.json").device_profile == "session"


def test_core_filter_and_event_budget(tmp_path: Path) -> None:
    budget = {"NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC": "2"}
    profiler = _profiler(tmp_path, NEURON_RT_INSPECT_EVENT_FILTER_NC="1", **budget)
    assert profiler.targets("abc", 0) == [] and len(profiler.targets("abc", 1)) == 1
    for ts in range(5):
        profiler.event(_event(0, ts))
        profiler.event(_event(1, ts))
        profiler.event(_event(None, ts))
    profiler.close()
    [directory] = tmp_path.iterdir()
    events = read_system_trace(directory / "ntrace.jsonl")
    assert sorted((e.core, e.ts) for e in events if e.core is not None) == [(1, 0), (1, 1)]
    assert len([e for e in events if e.core is None]) == 2  # the process's own events share one budget


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("NEURON_RT_INSPECT_DEVICE_PROFILE", "sometimes"),
        ("NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC", "many"),
        ("NEURON_RT_INSPECT_EVENT_FILTER_NC", "3-1"),
    ],
)
def test_bad_settings_are_refused(tmp_path: Path, name: str, value: str) -> None:
    with pytest.raises(ValueError, match=name):
        _profiler(tmp_path, **{name: value})


def test_a_daemon_request_captures_the_next_steps_then_reports_them(tmp_path: Path) -> None:
    profiler = Profiler({}, lambda: INFO)
    answer = {"faults": {}, "profile": {"id": 7, "steps": 2, "output_dir": str(tmp_path)}}
    profiler.step_begins(1)
    profiler.on_answer(answer)  # arrives with step 1's execution: steps 2 and 3 are captured
    assert profiler.active
    assert profiler.step_ends(1) == []
    profiler.on_answer(answer)  # the same request again: taken once
    for step in (2, 3):
        profiler.step_begins(step)
        [capture] = profiler.targets("abc", 0)
        capture.add_execution(HEADER, _execution(step))
        profiler.event(_event(0, step))
        done = profiler.step_ends(step)
    assert done == [(7, [str(tmp_path / "i-0123_pid_4242")], None)]
    assert not profiler.active and profiler.targets("abc", 0) == []
    _, executions = read_device_profile(tmp_path / "i-0123_pid_4242" / "neff_abc_vnc_0.ntff")
    assert [e.step for e in executions] == [2, 3]


def test_a_request_for_the_variables_directory_shares_their_capture(tmp_path: Path) -> None:
    profiler = _profiler(tmp_path)  # model mode
    profiler.on_answer({"profile": {"id": 1, "steps": 1, "output_dir": str(tmp_path)}})
    profiler.step_begins(1)
    for _ in range(2):  # model mode alone would profile only the first
        [capture] = profiler.targets("abc", 0)
        capture.add_execution(HEADER, _execution(1))
    assert profiler.step_ends(1) == [(1, [str(capture.directory)], None)]
    assert profiler.targets("abc", 0) == []
    assert profiler.abandon() == []


# --- real processes -----------------------------------------------------------------------------


def _capture_dir(output: Path) -> Path:
    [directory] = [d for d in output.iterdir() if d.is_dir()]
    return directory


def _check_engines(directory: Path) -> list[ProfiledExecution]:
    """Every profiled execution's engine time is its graph's op time per engine x the slow factor."""
    seen = []
    for ntff in directory.glob("*.ntff"):
        header, executions = read_device_profile(ntff)
        graph = read_graph(directory / f"neff_{header.graph_hash}.neff")
        per_engine: dict[str, float] = {}
        for engine, start, end in zip(graph.ops.engine, graph.ops.start, graph.ops.end, strict=True):
            per_engine[engine] = per_engine.get(engine, 0.0) + (end - start)
        for ex in executions:
            for engine, seconds in ex.engines.items():
                assert seconds == pytest.approx(per_engine.get(engine, 0.0) * ex.slow_factor, rel=1e-9, abs=1e-15)
            seen.append(ex)
    return seen


def _run_gpt_tiny(address: str, output: Path, steps: int, **env: str):
    out = run_tool(
        ["neuron-emulator", "run", "gpt-tiny", "--steps", str(steps)],
        address,
        timeout=300,
        NEURON_RT_INSPECT_ENABLE="1",
        NEURON_RT_INSPECT_OUTPUT_DIR=str(output),
        **env,
    )
    assert out.returncode == 0, out.stderr
    return out


def test_gpt_tiny_model_mode_profiles_each_graph_once_on_a_slow_core(daemon, short_tmp: Path) -> None:
    slow = run_tool(["neuron-emulator", "fault", "slow", "--factor", "2"], daemon.address)
    assert slow.returncode == 0, slow.stderr
    _run_gpt_tiny(daemon.address, short_tmp / "output", 3)
    directory = _capture_dir(short_tmp / "output")
    info = read_trace_info(directory / "trace_info.json")
    assert directory.name == f"{info.instance_id}_pid_{info.pid}" and info.instance_type == "trn1.2xlarge"
    assert info.device_profile == "model" and info.ranks == {"0": 0}
    neffs, ntffs = sorted(directory.glob("*.neff")), sorted(directory.glob("*.ntff"))
    assert len(neffs) == 2 and len(ntffs) == 2  # step 1's graph, then the steady step's: one core
    executions = _check_engines(directory)
    assert len(executions) == 2 and {e.number for e in executions} == {1}
    # the first execution ran before the daemon's answer carried the fault, the next ones after it
    assert sorted(e.slow_factor for e in executions) == [1.0, 2.0]
    logged = daemon.client.get("/snapshot")["latency_log"]
    for ex in executions:  # the very execution the daemon counted
        starts = [end - device for _, end, _, device in logged if device == ex.device_seconds]
        assert any(start == pytest.approx(ex.start) for start in starts)
    events = read_system_trace(directory / "ntrace.jsonl")
    kinds = {e.kind for e in events}
    assert {"nrt_execute", "step", "cpu_util", "host_to_device"} <= kinds and kinds & {"compile", "cache_hit"}
    assert [e.name for e in events if e.kind == "step"] == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    assert all(e.track == "neuron_rt/NC:0" for e in events if e.kind == "nrt_execute")


def test_gpt_tiny_session_mode_profiles_every_execution_the_daemon_counted(daemon, short_tmp: Path) -> None:
    _run_gpt_tiny(
        daemon.address,
        short_tmp / "output",
        4,
        NEURON_RT_INSPECT_DEVICE_PROFILE="session",
        NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC="6",
    )
    directory = _capture_dir(short_tmp / "output")
    executions = _check_engines(directory)
    assert sorted(e.step for e in executions) == [1, 2, 3, 4]
    retired = daemon.client.get("/snapshot")["retired"]["cores"]["0"]
    assert sum(e.device_seconds for e in executions) == pytest.approx(retired["busy"], rel=1e-9)
    for engine, busy in retired["engines"].items():
        assert sum(e.engines.get(engine, 0.0) for e in executions) == pytest.approx(busy, rel=1e-9, abs=1e-15)
    events = read_system_trace(directory / "ntrace.jsonl")
    assert len([e for e in events if e.core == 0]) == 6  # the per-NeuronCore budget


def test_an_exec_script_annotations_reach_the_system_trace_and_a_trace_window(daemon, short_tmp: Path) -> None:
    out = run_tool(
        ["neuron-emulator", "exec", "--", "python", str(SAMPLES / "profiled_steps.py"), str(short_tmp / "tb")],
        daemon.address,
        timeout=240,
        NEURON_RT_INSPECT_ENABLE="1",
        NEURON_RT_INSPECT_OUTPUT_DIR=str(short_tmp / "output"),
    )
    assert out.returncode == 0, out.stderr
    events = read_system_trace(_capture_dir(short_tmp / "output") / "ntrace.jsonl")
    annotations = [e for e in events if e.kind == "annotation"]
    assert [e.name for e in annotations].count("forward") == 3
    steps = [e for e in annotations if e.name == "train_step"]
    assert [e.args["step_num"] for e in steps] == [0, 1, 2]
    assert all(e.track.startswith("framework/TID:") and e.dur > 0 for e in annotations)
    assert len([e for e in events if e.kind == "nrt_execute"]) == 3  # StepTrace ended each step
    [trace] = list((short_tmp / "tb" / "plugins" / "profile").glob("*/*.pt.trace.json"))
    document = json.loads(trace.read_text())
    names = {e["name"] for e in document["traceEvents"]}
    assert {"train_step", "forward", "ProfilerStep#1"} <= names
    assert document["distributedInfo"] == {"backend": "xla", "rank": 0, "world_size": 1}


def test_a_bad_device_profile_setting_is_one_line(daemon) -> None:
    out = run_tool(
        ["neuron-emulator", "run", "mlp", "--steps", "1"],
        daemon.address,
        NEURON_RT_INSPECT_ENABLE="1",
        NEURON_RT_INSPECT_DEVICE_PROFILE="always",
    )
    assert out.returncode == 1
    assert one_clear_line(out.stderr), out.stderr
    assert "NEURON_RT_INSPECT_DEVICE_PROFILE='always'" in out.stderr
