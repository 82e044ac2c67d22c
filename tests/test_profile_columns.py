"""The op slices kept by column (neurontools/profile/shape.py): executions laid out alike share
one shape, and the traces' op events written from per-shape pieces are exactly what the
one-slice-at-a-time writers give (tests/profile_support.py's capture)."""

from __future__ import annotations

import gc
import json
import random
from collections import Counter
from pathlib import Path

import pytest

from neurontools.profile import chrome, perfetto
from neurontools.profile import protobuf as pb
from neurontools.profile.build import Timeline, build
from neurontools.profile.cli import main
from neurontools.profile.load import load
from tests import profile_support as ps


def _capture(root: Path, *, epoch: float = ps.EPOCH, apart: float = 1e-3) -> Timeline:
    """One core: two executions laid out alike ``apart`` seconds apart, a third with a slower
    all-reduce after them (``apart`` under 0.4 ms: the first two overlap, as only a hand-made file does)."""
    executions = [
        ps.execution(1.0, 100),
        ps.execution(1.0, 100, number=2, start=ps.START + apart),
        ps.execution(1.0, 250, number=3, start=ps.START + 2e-3),
    ]
    ps.write_process(root, 100, 0, 0, executions, epoch=epoch)
    return build(load(str(root)))


@pytest.fixture
def timeline(tmp_path: Path) -> Timeline:
    return _capture(tmp_path / "out")


def test_executions_laid_out_alike_share_one_shape(timeline: Timeline) -> None:
    first, second, third = sorted(timeline.executions, key=lambda lay: lay.start)
    assert first.shape is second.shape and third.shape is not first.shape
    (a0, a1), (b0, b1) = first.op_times(), second.op_times()
    assert [b - a for a, b in zip(a0 + a1, b0 + b1, strict=True)] == pytest.approx([1e-3] * len(a0 + a1), abs=1e-12)
    later = [t3 - t1 for t1, t3 in zip(first.op_times()[0], third.op_times()[0], strict=True)]
    assert later[:2] == pytest.approx([2e-3] * 2) and later[-1] == pytest.approx(2e-3 + 150e-6)  # after the call
    assert [lay.lane_base for lay in (first, second, third)] == [0, 0, 0]


@pytest.mark.parametrize("apart", [1e-3, 30e-6])  # one after the other; overlapping (lanes stacked)
def test_chrome_op_events_are_the_slice_events(tmp_path: Path, apart: float) -> None:
    timeline = _capture(tmp_path / "out", apart=apart)
    assert any(lay.lane_base for lay in timeline.executions) == (apart < 1e-3)
    writer = chrome._Writer(timeline, {100})
    for lay in timeline.executions:
        for s in lay.op_slices():
            fast = [json.loads(e) for e in writer.ops.of_row(s.track)]
            assert writer.slice_event(s) in fast
    rows = {s.track for lay in timeline.executions for s in lay.op_slices()}
    written = [json.loads(e) for track in sorted(rows, key=lambda t: t.key) for e in writer.ops.of_row(track)]
    expected = [writer.slice_event(s) for s in sorted(timeline.slices, key=chrome._order) if s.track in rows]
    assert written == expected  # each row's slices by start, the longest first


@pytest.mark.parametrize("epoch", [ps.EPOCH, 1_000_000.0])  # ns timestamps of 9 bytes, and of fewer
def test_perfetto_op_packets_are_the_slice_packets(tmp_path: Path, epoch: float) -> None:
    timeline = _capture(tmp_path / "out", epoch=epoch)
    writer = perfetto._Writer(timeline)
    list(writer.descriptors())
    for lay in timeline.executions:
        fast: list[perfetto._Timed] = []
        writer.op_packets(lay, fast)
        plain = [event for s in lay.op_slices() for event in writer.slice_packets(s, [], [])]
        assert Counter(fast) == Counter(plain)
        assert fast == sorted(fast)  # one execution's events come in time order


def test_varint_matches_the_plain_base_128_encoding() -> None:
    def plain(value: int) -> bytes:
        value &= (1 << 64) - 1
        out = bytearray()
        while True:
            out.append(value & 0x7F | (0x80 if value > 0x7F else 0))
            if value <= 0x7F:
                return bytes(out)
            value >>= 7

    pick = random.Random(7)
    edges = [0, 1, 127, 128, (1 << 14) - 1, 1 << 14, (1 << 28) - 1, 1 << 28, (1 << 56) - 1, 1 << 56, (1 << 64) - 1]
    values = edges + [-1, -(1 << 63)] + [pick.getrandbits(pick.randint(1, 64)) for _ in range(5000)]
    for value in values:
        assert pb.varint(value) == plain(value), value


def test_view_leaves_the_garbage_collector_as_it_was(tmp_path: Path) -> None:
    out = str(ps.two_ranks(tmp_path / "out"))
    assert gc.isenabled()
    assert main(["view", "-d", out, "--output-format", "summary-json", "--output-file", str(tmp_path / "s")]) == 0
    assert gc.isenabled()
