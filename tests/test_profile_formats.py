"""neuron-profile's files read back by the tools people open them with: the Chrome trace by
Holistic Trace Analysis, the .pftrace by Perfetto's own protos (tests/profile_support.py)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import pytest
from hta.trace_analysis import TraceAnalysis
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pftrace

from neurontools.profile import chrome, perfetto
from neurontools.profile.build import Timeline, build
from neurontools.profile.load import load
from neurontools.profile.summary import summarize
from tests import profile_support as ps


@pytest.fixture
def timeline(tmp_path: Path) -> Timeline:
    return build(load(str(ps.two_ranks(tmp_path / "out"))))


def test_chrome_trace_is_kineto_shaped_and_nests(timeline: Timeline, tmp_path: Path) -> None:
    (path,) = chrome.write(timeline, str(tmp_path / "t.pt.trace.json"))
    doc = json.loads(path.read_text())
    assert list(doc)[:3] == ["schemaVersion", "deviceProperties", "distributedInfo"]
    assert doc["distributedInfo"] == {"backend": "xla", "rank": 0, "world_size": 2}
    events = doc["traceEvents"]
    assert {e["ph"] for e in events} >= {"X", "M", "s", "f", "C"}
    assert [e["name"] for e in events if e["name"].startswith("ProfilerStep#")] == ["ProfilerStep#1"] * 2
    assert sum(e["name"] == "ncclKernel_all_reduce" for e in events) == 2
    rows: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in events:
        if e["ph"] == "X":
            rows.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in rows.values():
        spans.sort(key=lambda x: (x[0], -x[1]))
        for (_, a1), (b0, b1) in itertools.pairwise(spans):
            assert b0 >= a1 - 1e-3 or b1 <= a1 + 1e-3


def test_hta_reads_one_file_per_rank(timeline: Timeline, tmp_path: Path) -> None:
    paths = chrome.write(timeline, str(tmp_path / "traces") + "/")
    assert sorted(p.name for p in paths) == ["rank-0.pt.trace.json", "rank-1.pt.trace.json"]
    analysis = TraceAnalysis(trace_dir=str(tmp_path / "traces"))
    breakdown = analysis.get_temporal_breakdown(visualize=False).set_index("rank")
    records = {r["rank"]: r for r in summarize(timeline)}
    for rank, r in records.items():
        compute = sum(r[f"{e}_engine_active_time"] for e in ("tensor", "vector", "scalar", "gpsimd"))
        row = breakdown.loc[rank]
        assert row["kernel_time(us)"] == pytest.approx(r["total_time"] * 1e6, abs=1)
        assert row["compute_time(us)"] == pytest.approx(compute * 1e6, abs=1)
        assert row["idle_time(us)"] == pytest.approx(0, abs=1)
        # non-compute: the DMA queue, the collective and the HBM tail
        assert row["non_compute_time(us)"] == pytest.approx((r["total_time"] - compute) * 1e6, abs=1)
    overlap = analysis.get_comm_comp_overlap(visualize=False).set_index("rank")
    assert list(overlap["comp_comm_overlap_pctg"]) == [0.0, 0.0]  # the collective runs between ops


def _pftrace(timeline: Timeline) -> pftrace.Trace:
    trace = pftrace.Trace()
    trace.ParseFromString(perfetto.encode(timeline))
    return trace


def test_perfetto_trace_parses_track_by_track(timeline: Timeline) -> None:
    trace = _pftrace(timeline)
    names = {}
    processes = []
    for packet in trace.packet:
        if packet.HasField("track_descriptor"):
            d = packet.track_descriptor
            names[d.uuid] = d.name
            if d.HasField("process"):
                processes.append(d.process.pid)
                assert "not per instruction" in d.description
    assert processes == [100, 101]
    begins = Counter(
        names[p.track_event.track_uuid] for p in trace.packet if p.HasField("track_event") and p.track_event.type == 1
    )
    expected = Counter(s.track.label for s in timeline.slices)
    assert begins == expected
    assert begins["NC0 TensorE"] == 2 and begins["NC1 CC-core"] == 1 and begins["steps"] == 2
    counters = Counter(
        names[p.track_event.track_uuid] for p in trace.packet if p.HasField("track_event") and p.track_event.type == 4
    )
    assert counters["NC0 tensor_utilization"] == 101 and counters["NC1 hbm_in_use"] == 1
    flows = [p.track_event for p in trace.packet if p.HasField("track_event") and p.track_event.flow_ids]
    ends = [p.track_event for p in trace.packet if p.HasField("track_event") and p.track_event.terminating_flow_ids]
    assert len(flows) == len(ends) == 1 and flows[0].name == "ncclKernel_all_reduce"


def test_perfetto_slices_begin_and_end_in_order(timeline: Timeline) -> None:
    depth: Counter[int] = Counter()
    last = 0
    for p in _pftrace(timeline).packet:
        if not p.HasField("track_event") or p.track_event.type not in (1, 2):
            continue
        assert p.timestamp >= last
        last = p.timestamp
        depth[p.track_event.track_uuid] += 1 if p.track_event.type == 1 else -1
        assert depth[p.track_event.track_uuid] >= 0
    assert all(v == 0 for v in depth.values())
