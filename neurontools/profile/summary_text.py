"""``summary-text`` (docs/profiling.md §Viewing): the summary as tables a person reads in a terminal.

A table with a row per (rank, NeuronCore, graph) — executions, total time, active share, each
engine's, the DMA queue's and the collectives' active shares, MFU and MBU —, the recommendations
as a list, then the collective groups (:mod:`neurontools.profile.groups`): each call of each
replica group with its median, its slowest rank and that rank's ratio to the median.

Rendered with rich: plain text (no ANSI codes, ASCII rules, no trailing spaces) at a fixed width
unless the output is a terminal, so a piped or saved summary is the same on every machine."""

from __future__ import annotations

import io
from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from neurontools.profile.groups import CollectiveGroup, abbreviate
from neurontools.profile.summary import Record
from neurontools.profile.tracks import COMPUTE_ENGINES, DMA, ENGINE_LABELS

PIPED_WIDTH = 160  # columns when the output is not a terminal
ABSENT = "-"
GRAPH_HASH_SHOWN = 8  # characters of a graph's hash next to its name
# rich's SIMPLE box (a rule under the header and above a footer, no column lines) in ASCII
ASCII_SIMPLE = box.Box("    \n    \n -- \n    \n    \n -- \n    \n    \n", ascii=True)


def summary_text(
    records: Sequence[Record], groups: Sequence[CollectiveGroup], *, width: int = PIPED_WIDTH, terminal: bool = False
) -> str:
    """The summary; ``terminal``: colours and box drawing for a terminal of ``width`` columns."""
    if not records:
        return "no profiled executions in this capture\n"
    out = io.StringIO()
    console = Console(
        file=out,
        width=width,
        force_terminal=terminal,
        color_system="auto" if terminal else None,
        highlight=False,
        markup=False,
        emoji=False,
        legacy_windows=False,
    )
    shape = box.SIMPLE_HEAD if terminal else ASCII_SIMPLE
    console.print(_cores_table(records, shape))
    console.print()
    for line in _recommendations(records):
        console.print(line, soft_wrap=not terminal)
    console.print()
    if groups:
        console.print(_groups_table(groups, shape))
    else:
        console.print("Collective groups: none (no collective call was profiled)")
    text = out.getvalue()
    return text if terminal else "".join(line.rstrip() + "\n" for line in text.splitlines())


def _pct(share: float | None) -> str:
    return ABSENT if share is None else f"{share * 100:.1f}%"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def _rank(record: Record) -> str:
    return ABSENT if record["rank"] is None else str(record["rank"])


def _cores_table(records: Sequence[Record], shape: box.Box) -> Table:
    table = Table(
        title="Summary per rank, NeuronCore and graph (over its profiled executions)",
        caption=_caption(records),
        box=shape,
        title_justify="left",
        caption_justify="left",
        collapse_padding=True,
        pad_edge=False,
    )
    for name in ("rank", "pid", "NC", "graph", "execs", "steps"):
        table.add_column(name, justify="left" if name == "graph" else "right", no_wrap=True)
    labels = ["total ms", "active", *(ENGINE_LABELS[e] for e in COMPUTE_ENGINES), ENGINE_LABELS[DMA]]
    for name in (*labels, "CC", "CC ms", "MFU", "MBU"):
        table.add_column(name, justify="right", no_wrap=True)
    for r in records:
        engines = [_pct(r[f"{e}_engine_active_time_percent"]) for e in COMPUTE_ENGINES]
        table.add_row(
            *(Text(cell) for cell in (_rank(r), str(r["pid"]), str(r["neuroncore"]))),
            Text(f"{r['graph_name']} ({r['graph_hash'][:GRAPH_HASH_SHOWN]})"),
            Text(str(r["execution_count"])),
            Text(abbreviate(r["steps"])),
            Text(_ms(r["total_time"])),
            Text(_pct(r["total_active_time_percent"])),
            *(Text(cell) for cell in engines),
            Text(_pct(r[f"{DMA}_active_time_percent"])),
            Text(_pct(r["cc_op_active_time_percent"])),
            Text(_ms(r["cc_op_time"])),
            Text(_pct(r.get("mfu_estimated_percent"))),
            Text(_pct(r.get("mbu_estimated_percent"))),
        )
    return table


def _caption(records: Sequence[Record]) -> str:
    """What the columns are, and the peaks MFU and MBU are over (trace_info.json's)."""
    peaks = sorted({(r.get("peak_flops"), r.get("hbm_bandwidth")) for r in records}, key=str)
    over = "; ".join(
        f"MFU over {flops / 1e12:g} TFLOP/s" if flops else "no MFU (the capture has no peak FLOP/s)"
        for flops, _ in peaks
    )
    mbu = "; ".join(f"MBU over {bw / 2**30:g} GiB/s HBM" if bw else "no MBU (no HBM bandwidth)" for _, bw in peaks)
    return (
        "active, engines, DMA and CC (collectives): busy share of the row's total (device) time; "
        f"CC ms: the collectives' summed seconds; {over}, {mbu} per NeuronCore"
    )


def _recommendations(records: Sequence[Record]) -> list[str]:
    lines = [
        f"- rank {_rank(r)} NC {r['neuroncore']} {r['graph_name']}: {text}"
        for r in records
        for text in r["recommendations"]
    ]
    return ["Recommendations:", *lines] if lines else ["Recommendations: none"]


def _groups_table(groups: Sequence[CollectiveGroup], shape: box.Box) -> Table:
    table = Table(
        title="Collective groups: each call of each replica group over the profiled steps, its slowest rank",
        caption="median ms and slowest ms: per-rank mean seconds per call, the median over the profiled ranks; "
        "! = the slowest rank of at least one occurrence took over 1.5x that occurrence's median",
        box=shape,
        title_justify="left",
        caption_justify="left",
        collapse_padding=True,
        pad_edge=False,
    )
    for name in ("graph", "call", "kind", "group", "ranks", "calls", "steps"):
        table.add_column(name, justify="left" if name in ("graph", "kind", "group") else "right")
    for name in ("median ms", "slowest rank", "slowest ms", "x median", "flag"):
        table.add_column(name, justify="right", no_wrap=True)
    for g in groups:
        ratio = ABSENT if g.ratio is None else f"{g.ratio:.2f}x"
        table.add_row(
            *(Text(cell) for cell in (g.graph_name, str(g.call), g.kind, abbreviate(g.ranks))),
            Text(f"{len(g.seconds)}/{len(g.ranks)}"),
            Text(str(g.calls)),
            Text(abbreviate(g.steps)),
            Text(_ms(g.median)),
            Text(str(g.slowest_rank)),
            Text(_ms(g.slowest_seconds)),
            Text(ratio),
            Text("!" if g.flagged else ""),
        )
    return table
