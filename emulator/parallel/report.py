"""Text of a model-scale parallel job: the run's header, step lines and summary, and the bench table.

Every figure is the plan's (``job.py``): simulated time of the modelled Trn1, not this host's.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TextIO

from emulator.workloads.summary import format_seconds

if TYPE_CHECKING:  # job.py traces with torch: printing a plan's figures needs no torch
    from emulator.parallel.job import JobPlan

GIB = 1 << 30


def _cores(plan: JobPlan) -> str:
    cores = sorted({p.core for p in plan.places})
    where = f"nc{cores[0]}-nc{cores[-1]}" if len(cores) > 1 else f"nc{cores[0]}"
    nodes = f" on each of {plan.config.nodes} nodes" if plan.config.nodes > 1 else ""
    return f"{plan.config.world} ranks on NeuronCores {where}{nodes} of a {plan.instance.name}"


class ParallelReport:
    def __init__(self, plan: JobPlan, steps: int, out: TextIO | None = None) -> None:
        self.plan = plan
        self.steps = steps
        self.out = out or sys.stdout
        self.every = min(10, max(1, steps // 10))
        self.lengths: dict[int, float] = {}  # step -> its length as the job ran it (lockstep)

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def header(self) -> None:
        p = self.plan
        self._print(
            f"{p.model} (model scale): {p.parameters_total:,} parameters, {p.config.describe()}, {p.dtype}, "
            f"Neuron SDK {p.options.sdk}, {self.steps} steps, {_cores(p)}"
        )
        compile_note = f"{p.compile_seconds:.1f} s simulated compile" if p.compile_seconds else "no compile"
        graphs = sum(len(s.program.graphs) for s in {id(s.program): s for s in p.stages.values()}.values())
        self._print(
            f"  traced {graphs} graphs in {p.trace_seconds:.1f} s; every rank replays them ({compile_note} "
            "before step 1 unless the compile cache has them)"
        )

    def step(self, step: int, seconds: float) -> None:
        self.lengths[step] = seconds
        if not (step == 1 or step % self.every == 0 or step == self.steps):
            return
        rate = self.plan.config.global_batch / seconds
        self._print(
            f"step {step:>{len(str(self.steps))}}/{self.steps}  {rate:,.1f} {self.plan.sample_unit}/s  "
            f"{format_seconds(seconds)}/step (simulated)"
        )

    def summary(self) -> None:
        steady = [s for step, s in self.lengths.items() if step > 1]
        measured = sum(steady) / len(steady) if steady else None
        for line in summary_lines(self.plan, self.steps, measured):
            self._print(line)


# a run's steady step this much longer than planned was slowed by a fault (docs/faults.md)
SLOWED = 1.001


def summary_lines(plan: JobPlan, steps: int, measured_step: float | None = None) -> list[str]:
    """``measured_step``: the mean steady step as the job ran it; shown when faults (a slow core,
    cut EFA bandwidth) made it longer than the plan's."""
    lines = [f"{plan.model}: {steps} steps, {plan.config.world} ranks, {plan.config.describe()}"]

    def row(label: str, text: str) -> None:
        lines.append(f"  {label:<17}{text}")

    unit = plan.sample_unit
    slowed = measured_step is not None and measured_step > plan.step_seconds * SLOWED
    if slowed and measured_step is not None:
        rate = plan.config.global_batch / measured_step
        row(
            "throughput",
            f"{rate:,.1f} {unit}/s simulated, steady steps as run "
            f"(planned {plan.samples_per_second:,.1f}: faults slowed the job)",
        )
        row(
            "step time",
            f"{format_seconds(measured_step)} simulated as run (planned {format_seconds(plan.step_seconds)})",
        )
    else:
        row("throughput", f"{plan.samples_per_second:,.1f} {unit}/s simulated, steady steps")
        row(
            "step time",
            f"{format_seconds(plan.step_seconds)} simulated "
            f"(first step {format_seconds(plan.first_timeline.step_seconds)})",
        )
    row("MFU", f"{plan.mfu * 100:.1f} % (6 x parameters x tokens/s over the cores' BF16 peak)")
    for s in sorted(plan.stages):
        label = "utilization" if plan.config.pp == 1 else f"stage {s}"
        bubble = f", pipeline bubble {plan.timeline.bubble(s) * 100:.1f} %" if plan.config.pp > 1 else ""
        row(label, f"{plan.utilization(s) * 100:.1f} % of each core's time executing graphs{bubble}")
        row(
            "peak HBM/core" if plan.config.pp == 1 else "",
            f"{plan.hbm_peak(s) / GIB:.2f} GiB of {plan.instance.core_memory_bytes / GIB:.0f} GiB",
        )
    comm = _collective_seconds(plan)
    if comm:
        exposed = plan.collective_share(0) * plan.step_seconds
        row(
            "collectives",
            ", ".join(f"{k} {format_seconds(v)}/step" for k, v in comm.items())
            + f"; {format_seconds(exposed)}/step not hidden by compute",
        )
    return lines


def _collective_seconds(plan: JobPlan) -> dict[str, float]:
    """Collective time per steady step on stage 0, by replica group."""
    totals: dict[str, float] = {}
    cost = plan.stages[0]
    for slot in plan.timeline.stages[0].slots:
        for c in cost.collectives[slot.graph]:
            totals[c.group] = totals.get(c.group, 0.0) + c.seconds
    return totals


def bench_lines(rows: list[dict[str, Any]], *, nccom: bool) -> list[str]:
    lines = [
        f"{'row':<36} {'SDK':>5} {'published':>10} {'emulated':>10} {'ratio':>6} {'step':>9} {'MFU':>6} {'util':>6}"
        f" {'CC exp.':>7}  engines (busy share)"
    ]
    for r in rows:
        pub = f"{r['published_seq_per_s']:,.1f}" if r["published_seq_per_s"] else "-"
        ratio = f"{r['ratio']:.2f}" if r["ratio"] else "-"
        util = min(r["utilization"].values())
        engines = " ".join(f"{k} {v * 100:.0f}%" for k, v in r["engine_share"].items() if v > 0.005)
        lines.append(
            f"{r['name']:<36} {r.get('sdk', '-'):>5} {pub:>10} {r['emulated_seq_per_s']:>10,.1f} {ratio:>6} "
            f"{format_seconds(r['step_seconds']):>9} {r['mfu'] * 100:>5.1f}% {util * 100:>5.1f}% "
            f"{r['exposed_collectives'] * 100:>6.1f}%  {engines}"
        )
    by_name = {r["name"]: r for r in rows}
    bf16, fp32 = by_name.get("BERT-Large Ph1 DP32 BF16+SR"), by_name.get("BERT-Large Ph1 DP32 FP32")
    if bf16 and fp32:
        lines.append(
            "BERT-Large BF16/FP32 throughput: published "
            f"{bf16['published_seq_per_s'] / fp32['published_seq_per_s']:.2f}x, "
            f"emulated {bf16['emulated_seq_per_s'] / fp32['emulated_seq_per_s']:.2f}x"
        )
    if nccom:
        lines += nccom_lines()
    return lines


def nccom_lines() -> list[str]:
    """The cost model's collectives against the nccom-test points of the catalog."""
    from emulator.costmodel.topology import cost_group_collective
    from emulator.hardware import get_instance_type
    from emulator.hardware.neuroncore_v2 import NCCOM_CALIBRATION

    instance = get_instance_type("trn1.32xlarge")
    lines = ["nccom-test points (measured on trn1; model / measured):"]
    for series in NCCOM_CALIBRATION:
        cores = list(range(min(series.ranks, instance.core_count)))
        nodes = max(1, series.ranks // instance.core_count)
        if nodes > 1:
            cores = list(range(series.ranks))
        parts = []
        for size, us in series.points:
            model = cost_group_collective(series.collective, size, cores, instance, nodes=nodes).seconds * 1e6
            parts.append(f"{_size(size)} {model / us:.2f}")
        lines.append(
            f"  {series.collective} {series.ranks} ranks ({nodes} node{'s' if nodes > 1 else ''}): " + ", ".join(parts)
        )
    return lines


def _size(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n // size} {unit}"
    return f"{n} B"
