"""neuron-profile's summary-text (rich tables) and the collective groups of summary-json, on the
synthetic captures of tests/profile_support.py."""

from __future__ import annotations

import dataclasses
import io
import re
import sys
from pathlib import Path

import pytest

from neurontools.contract import profile as p
from neurontools.profile.build import Timeline, build
from neurontools.profile.cli import main
from neurontools.profile.groups import abbreviate, collective_groups
from neurontools.profile.load import load
from neurontools.profile.summary import summarize, summary_document
from neurontools.profile.summary_text import PIPED_WIDTH, summary_text
from tests import profile_support as ps

ANSI = re.compile(r"\x1b\[")


@pytest.fixture
def timeline(tmp_path: Path) -> Timeline:
    return build(load(str(ps.two_ranks(tmp_path / "out"))))


def _text(timeline: Timeline, **kwargs: object) -> str:
    return summary_text(summarize(timeline), collective_groups(timeline.executions), **kwargs)  # type: ignore[arg-type]


def test_piped_summary_is_plain_fixed_width_tables(timeline: Timeline) -> None:
    text = _text(timeline)
    lines = text.splitlines()
    assert not ANSI.search(text) and text.isascii()
    assert all(len(line) <= PIPED_WIDTH and line == line.rstrip() for line in lines)
    head = next(line for line in lines if line.lstrip().startswith("rank"))
    assert head.split() == [
        "rank", "pid", "NC", "graph", "execs", "steps", "total", "ms", "active",
        "TensorE", "VectorE", "ScalarE", "GpSimd", "DMA", "CC", "CC", "ms", "MFU", "MBU",
    ]  # fmt: skip
    rank1 = next(line for line in lines if line.split()[:2] == ["1", "101"]).split()
    # total 1.2 ms; TensorE 400 us of it; CC: 400 us of 1.2 ms
    assert rank1[2:9] == ["1", "train_step", "(abc123de)", "1", "1", "1.200", "90.0%"]
    assert rank1[9] == "33.3%" and rank1[14:16] == ["33.3%", "0.400"]
    recs = lines.index("Recommendations:")
    assert any("rank 1 NC 1 train_step: all_reduce (step 1, call 0)" in line for line in lines[recs:])
    group = next(line for line in lines if line.startswith(" train_step") and "all_reduce" in line).split()
    # graph, call, kind, group, ranks profiled, calls, steps, median, slowest rank, its ms, ratio, flag
    assert group == ["train_step", "0", "all_reduce", "0,1", "2/2", "1", "1", "0.250", "1", "0.400", "1.60x", "!"]


def test_terminal_summary_has_colour_and_the_terminals_width(timeline: Timeline) -> None:
    text = _text(timeline, width=100, terminal=True)
    assert ANSI.search(text)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert max(len(line) for line in plain.splitlines()) <= 100


def test_view_writes_plain_text_when_stdout_is_not_a_terminal(
    timeline: Timeline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["view", "-d", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert out == _text(timeline) and not ANSI.search(out)

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Tty()
    monkeypatch.setattr(sys, "stdout", tty)
    monkeypatch.setenv("COLUMNS", "120")  # what shutil.get_terminal_size reads first
    assert main(["view", "-d", str(tmp_path / "out")]) == 0
    text = tty.getvalue()
    assert ANSI.search(text) and max(len(line) for line in re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines()) <= 120


def test_no_executions_and_no_collectives(tmp_path: Path) -> None:
    assert summary_text([], []) == "no profiled executions in this capture\n"
    ps.write_process(tmp_path, 7, 0, 0, [ps.execution(1.0, 0)], peaks=False)
    timeline = build(load(str(tmp_path)))
    text = _text(timeline)
    assert "no MFU (the capture has no peak FLOP/s)" in " ".join(text.split())
    row = next(line for line in text.splitlines() if line.split()[:2] == ["0", "7"]).split()
    assert row[-2:] == ["-", "-"]  # MFU and MBU absent, not 0
    (group,) = collective_groups(timeline.executions)  # one rank of its group profiled
    assert (len(group.seconds), group.ratio, group.flagged) == (1, 1.0, False)


def test_groups_aggregate_steps_per_rank(tmp_path: Path) -> None:
    """Three steps: rank 1's all-reduce takes 100, 400, 100 µs; rank 0's always 100 µs. Per rank
    the mean over the steps: 100 and 200 µs; the median (two ranks) 150 µs; one outlier step."""
    ex = ps.execution
    ps.write_process(tmp_path, 100, 0, 0, [ex(1.0, 100, step=s, number=s, start=ps.START + s) for s in (1, 2, 3)])
    rank1 = [ex(1.0, us, step=s, number=s, start=ps.START + s) for s, us in ((1, 100), (2, 400), (3, 100))]
    ps.write_process(tmp_path, 101, 1, 1, rank1)
    timeline = build(load(str(tmp_path)))
    (group,) = collective_groups(timeline.executions)
    assert (group.calls, group.steps, group.ranks, group.kind) == (3, (1, 2, 3), (0, 1), "all_reduce")
    assert group.seconds == pytest.approx({0: 100e-6, 1: 200e-6})
    assert group.median == pytest.approx(150e-6) and group.slowest_rank == 1
    assert group.ratio == pytest.approx(4 / 3) and group.outlier_calls == 1
    (row,) = summary_document(timeline)["collective_groups"]
    assert row["seconds_by_rank"] == pytest.approx({"0": 100e-6, "1": 200e-6})
    assert (row["steps"], row["ranks_profiled"], row["outlier_calls"]) == ([1, 2, 3], 2, 1)


def test_calls_of_two_graphs_are_not_one_group_call(tmp_path: Path) -> None:
    """Two graphs with a call at the same index, same group, step and execution number are two
    operations (a step's micro_step and its optimizer)."""
    for pid, rank in ((100, 0), (101, 1)):
        d = ps.write_process(tmp_path, pid, rank, rank, [ps.execution(1.0, 100)])
        other = dataclasses.replace(ps.graph(), hash="fedcba9876543210", name="optimizer")
        p.write_graph(d / p.neff_file(other.hash), other)
        placement = p.CollectivePlacement(0, (0, 1), (0, 1), "neuronlink", "ring", 50e9, 1e-4)
        header = p.DeviceProfileHeader(other.hash, other.name, rank, rank, 2, collectives=(placement,))
        run = ps.execution(1.0, 300, start=ps.START + 0.01)
        (d / p.ntff_file(other.hash, rank)).write_text(p.json_line(header) + p.json_line(run))
    timeline = build(load(str(tmp_path)))
    groups = collective_groups(timeline.executions)
    assert [(g.graph_name, g.calls, len(g.seconds)) for g in groups] == [("train_step", 1, 2), ("optimizer", 1, 2)]
    assert groups[1].median == pytest.approx(300e-6)
    assert len(timeline.flows) == 2


@pytest.mark.parametrize(
    ("numbers", "text"),
    [
        ([], "-"),
        ([3], "3"),
        ([0, 1], "0,1"),
        ([2, 3], "2,3"),
        (range(8), "0-7"),
        ([0, 8, 16, 24], "0,8,16,24"),
        ([0, 1, 2, 3, 8, 9, 10, 11], "0-3,8-11"),
        (range(0, 256, 8), "0,8,...,248"),
        ([5, 1, 3, 2], "1-3,5"),
    ],
)
def test_abbreviate(numbers: list[int], text: str) -> None:
    assert abbreviate(numbers) == text
