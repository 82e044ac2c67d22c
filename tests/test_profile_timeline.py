"""neuron-profile's timeline and summary on a synthetic two-rank capture (tests/profile_support.py)."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

from neurontools.profile.build import Timeline, build
from neurontools.profile.load import load
from neurontools.profile.summary import summarize
from neurontools.profile.tracks import CC_TRACK, COLLECTIVE, HBM_TAIL, HOST
from tests import profile_support as ps

TOL = 1e-9  # seconds: float rounding of monotonic times around 1000 s


@pytest.fixture
def timeline(tmp_path: Path) -> Timeline:
    return build(load(str(ps.two_ranks(tmp_path / "out"))))


def test_engine_active_time_equals_the_executions_engine_record(timeline: Timeline) -> None:
    assert len(timeline.executions) == 2
    for lay in timeline.executions:
        for engine, seconds in lay.execution.engines.items():
            laid = sum(s.seconds for s in lay.device_slices() if s.track.engine == engine)
            assert laid == pytest.approx(seconds, abs=TOL), engine


def test_collective_shifts_later_ops_and_hbm_tail_fills_device_time(timeline: Timeline) -> None:
    lay = timeline.executions[0]  # rank 0: healthy, 100 µs all-reduce after captured op 4
    rel = {(s.track.name, round((s.start - lay.start) * 1e6, 3)): s for s in lay.slices}
    assert (CC_TRACK, 200.0) in rel  # where the first op captured after it would have started
    assert ("TensorE", 300.0) in rel and ("ScalarE", 400.0) in rel  # shifted by 100 µs
    tail = [s for s in lay.slices if s.kind == HBM_TAIL]
    assert len(tail) == 1 and tail[0].end == pytest.approx(lay.end, abs=TOL)
    assert tail[0].seconds == pytest.approx(60e-6, abs=TOL)
    host = [s for s in lay.slices if s.kind == HOST]
    assert host[0].end == lay.start and host[0].seconds == pytest.approx(50e-6)


@pytest.mark.parametrize(("cc_us", "exposed_us"), [(100, 0), (150, 30)])
def test_an_overlapped_collective_delays_only_the_ops_after_its_wait(
    tmp_path: Path, cc_us: int, exposed_us: int
) -> None:
    # issued before captured op 5 (TensorE at 200 µs), first needed by op 7 (GpSimd at 320 µs):
    # ops 5 and 6 (120 µs) run meanwhile (neurontools/contract/overlap.py)
    ps.write_process(tmp_path, 7, 0, 0, [ps.execution(1.0, cc_us, exposed_us=exposed_us)], wait_op=7)
    (lay,) = build(load(str(tmp_path))).executions
    rel = {(s.track.name, round((s.start - lay.start) * 1e6, 3)): s for s in lay.slices}
    assert (CC_TRACK, 200.0) in rel and rel[(CC_TRACK, 200.0)].seconds == pytest.approx(cc_us * 1e-6)
    assert ("TensorE", 200.0) in rel and ("ScalarE", 300.0) in rel  # not moved
    assert ("GpSimd", 320.0 + exposed_us) in rel  # moved by what the 120 µs did not hide
    assert lay.end - lay.start == pytest.approx((ps.COMPUTE_US + exposed_us) * 1e-6, abs=TOL)


def test_collective_seconds_fall_back_to_the_placement_times_slow_factor(tmp_path: Path) -> None:
    ps.write_process(tmp_path, 7, 0, 0, [ps.execution(2.0, 0)], cc_seconds=30e-6)
    (lay,) = build(load(str(tmp_path))).executions
    (call,) = [s for s in lay.slices if s.kind == COLLECTIVE]
    assert call.seconds == pytest.approx(60e-6, abs=TOL)
    assert call.args["seconds_from"] == "placement"


def test_summary_fields_and_fractions(timeline: Timeline) -> None:
    r0, r1 = summarize(timeline)
    assert r0["total_time"] == timeline.executions[0].execution.device_seconds
    assert r1["total_time"] == timeline.executions[1].execution.device_seconds
    assert r0["total_active_time"] == pytest.approx(440e-6, abs=TOL)  # the HBM tail is not active
    assert r0["tensor_engine_active_time_percent"] == pytest.approx(0.4, abs=1e-6)
    assert r0["dma_active_time"] == pytest.approx(50e-6, abs=TOL)
    assert r0["cc_op_count"] == 1 and r0["cc_op_time"] == pytest.approx(100e-6, abs=TOL)
    assert r0["mfu_estimated_percent"] == pytest.approx(4e6 / (95e12 * 500e-6))
    assert r0["mbu_estimated_percent"] == pytest.approx(9000 / 500e-6 / (410 * 2**30))
    for r in (r0, r1):
        for key, value in r.items():
            if key.endswith("_percent"):
                assert 0.0 <= value <= 1.0, key
        for absent in ("tensor_engine_instruction_count", "sbuf_read_bytes", "spill_save_bytes", "throttle_count"):
            assert absent not in r


def test_an_execution_that_never_ran_has_no_device_slices(tmp_path: Path) -> None:
    failed = dataclasses.replace(
        ps.execution(1.0, 0, step=2, start=ps.START + 1.0),
        device_seconds=0.0,
        engines={},
        flops=0,
        collectives=(),
        outcome="completed_with_err",
    )
    ps.write_process(tmp_path, 7, 0, 0, [ps.execution(1.0, 100), failed])
    timeline = build(load(str(tmp_path)))
    ok, bad = timeline.executions
    assert not list(bad.device_slices())  # only the host share before it
    (record,) = summarize(timeline)
    assert record["total_time"] == ok.execution.device_seconds
    for engine, seconds in ok.execution.engines.items():
        key = f"{engine}_engine_active_time" if engine != "dma" else "dma_active_time"
        assert record[key] == pytest.approx(seconds, abs=TOL)
    assert all(0.0 <= v <= 1.0 for k, v in record.items() if k.endswith("_percent"))


def test_a_capture_without_its_peaks_has_no_mfu_hfu_or_mbu(tmp_path: Path) -> None:
    ps.write_process(tmp_path, 7, 0, 0, [ps.execution(1.0, 0)], peaks=False)
    (record,) = summarize(build(load(str(tmp_path))))
    assert record["model_flops"] > 0
    for absent in ("mfu_estimated_percent", "hfu_estimated_percent", "mbu_estimated_percent", "peak_flops"):
        assert absent not in record


def test_recommendations_flag_low_mfu_and_the_slow_rank(timeline: Timeline) -> None:
    r0, r1 = summarize(timeline)
    assert any("MFU" in t for t in r0["recommendations"])
    assert not any("replica group" in t for t in r0["recommendations"])
    assert any("rank 1" in t and "replica group [0, 1]" in t for t in r1["recommendations"])


def test_collectives_of_one_group_are_linked_across_ranks(timeline: Timeline) -> None:
    (flow,) = timeline.flows
    assert {flow.source.track.pid, flow.target.track.pid} == {100, 101}
    assert flow.source.kind == flow.target.kind == COLLECTIVE


def test_slices_on_a_row_nest(timeline: Timeline) -> None:
    by_track: dict[object, list[tuple[float, float]]] = {}
    for s in timeline.slices:
        by_track.setdefault(s.track, []).append((s.start, s.end))
    for spans in by_track.values():
        spans.sort(key=lambda x: (x[0], -x[1]))
        for (_a0, a1), (b0, b1) in itertools.pairwise(spans):
            assert b0 >= a1 - TOL or b1 <= a1 + TOL


def test_partly_overlapping_slices_move_to_a_second_lane(tmp_path: Path) -> None:
    ps.write_process(
        tmp_path, 5, 0, 0, [ps.execution(1.0, 100), ps.execution(1.0, 100, number=2, start=ps.START + 30e-6)]
    )
    timeline = build(load(str(tmp_path)))
    assert any(s.track.lane == 1 for s in timeline.slices)
    assert summarize(timeline)[0]["execution_count"] == 2
