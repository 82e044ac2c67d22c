"""Figures derived from a run's steps — throughput, step time, loss — and their text.

Every figure says where it comes from: ``simulated`` (the emulated device's time for the step,
``xm.last_step().device_seconds``) or ``wall`` (this host's clock, when the emulator reports no
device time). Model-scale workloads do no arithmetic, so their wall time means nothing and no
throughput is shown for them without simulated time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from emulator.workloads.results import RunHeader, RunResult, StepStats

GIB = 1 << 30


@dataclass(frozen=True)
class Rate:
    samples_per_second: float
    seconds_per_step: float
    source: str  # "simulated" or "wall"


def step_rate(stats: StepStats) -> Rate | None:
    device = stats.device_seconds
    if device is not None and device > 0:
        return Rate(stats.samples / device, device, "simulated")
    if stats.wall_seconds > 0:
        return Rate(stats.samples / stats.wall_seconds, stats.wall_seconds, "wall")
    return None


def number_ranges(noun: str, values: Sequence[int]) -> str:
    """``step 3``, ``steps 0-1, 3-31`` or ``no steps``: the numbers, consecutive ones as ranges
    (steps of a run, ranks of a job)."""
    if not values:
        return f"no {noun}s"
    # consecutive numbers keep the same difference to their position in the sorted list
    runs = [[v for _, v in run] for _, run in groupby(enumerate(sorted(values)), lambda iv: iv[1] - iv[0])]
    text = ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)
    return f"{noun} {text}" if len(values) == 1 else f"{noun}s {text}"


def steady_rate(result: RunResult) -> tuple[Rate | None, str]:
    """Throughput over the steps that did not compile a graph (simulated), or over all steps but
    the first (wall: the first step also allocates optimizer state). Returns the rate and which
    steps it covers."""
    simulated = [s for s in result.steps if s.device_seconds is not None and s.device_seconds > 0]
    if simulated:
        steady = [s for s in simulated if s.compiled is not True] or simulated
        seconds, kind = sum(s.device_seconds or 0.0 for s in steady), "simulated"
    elif result.steps:
        steady = result.steps[1:] or result.steps
        seconds, kind = sum(s.wall_seconds for s in steady), "wall"
    else:
        return None, ""
    samples = sum(s.samples for s in steady)
    return Rate(samples / seconds, seconds / len(steady), kind), number_ranges("step", [s.step for s in steady])


def format_seconds(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} us"


def format_cores(cores: tuple[int, ...]) -> str:
    if not cores:
        return "none"
    return f"nc{cores[0]}" if len(cores) == 1 else f"nc{cores[0]}-nc{cores[-1]}"


def header_line(h: RunHeader) -> str:
    shape = f"batch {h.batch_size}" + (f" x seq {h.seq_len}" if h.seq_len is not None else "")
    where = f"NeuronCores {format_cores(h.neuroncores)}" if h.neuroncores else "no emulated device (plain CPU)"
    if h.neuroncores and h.world_size > 1:
        where = f"rank 0 on {where}"
    ranks = f"{h.world_size} rank" + ("s" if h.world_size != 1 else "")
    return (
        f"{h.workload} ({h.kind}): {h.parameters:,} parameters, {shape} per rank, {ranks}, {h.dtype}, "
        f"AdamW lr {h.lr:g}, {h.steps} steps, {where}"
    )


def summary_lines(result: RunResult) -> list[str]:
    h = result.header
    ranks = f"{h.world_size} rank" + ("s" if h.world_size != 1 else "")
    lines = [f"{h.workload}: {len(result.steps)} steps, {ranks}, {result.wall_seconds:.1f} s wall"]

    def row(label: str, text: str) -> None:
        lines.append(f"  {label:<17}{text}")

    first, final = result.first_loss, result.final_loss
    if first is not None and final is not None:
        whose = " on rank 0's batches" if h.world_size > 1 else ""
        row("loss", f"{first:.4f} (step 1) -> {final:.4f} (step {result.steps[-1].step}){whose}")

    rate, covered = steady_rate(result)
    unit = h.sample_unit
    if rate is None:
        row("throughput", "n/a (no step completed)")
    elif rate.source == "simulated":
        row("throughput", f"{rate.samples_per_second:,.1f} {unit}/s simulated, {covered}")
        row("step time", f"{format_seconds(rate.seconds_per_step)} simulated device time (mean)")
    else:
        row(
            "throughput",
            f"{rate.samples_per_second:,.1f} {unit}/s from host wall time, {covered} "
            "(the emulator reports no simulated device time yet)",
        )
        row("step time", f"{format_seconds(rate.seconds_per_step)} wall (mean)")

    compiled = [s.step for s in result.steps if s.compiled]
    if any(s.compiled is not None for s in result.steps):
        row("graphs compiled", f"{len(compiled)}" + (f" ({number_ranges('step', compiled)})" if compiled else ""))
    flops = [s for s in result.steps if s.device and s.device.flops is not None and s.device_seconds]
    if flops:
        total = sum(s.device.flops or 0 for s in flops if s.device)
        seconds = sum(s.device_seconds or 0.0 for s in flops)
        tflops = total / seconds / 1e12
        row("device compute", f"{tflops:,.2f} TFLOP/s simulated, this process (mean over {len(flops)} steps)")

    if result.hbm_peak:
        cores = ", ".join(f"nc{core} {used / GIB:.2f} GiB" for core, used in result.hbm_peak.items())
        row("peak HBM/core", f"{cores} (this process, high-water mark of its HBM ledger)")
    else:
        row("peak HBM/core", f"n/a ({result.hbm_reason})" if result.hbm_reason else "n/a")
    return lines
