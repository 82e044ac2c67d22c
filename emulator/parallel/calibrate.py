"""Re-fit the two fitted constants of the emulator on the two published calibration rows.

1. ``HOST_SECONDS_PER_DEVICE_OP`` (``host.py``): the host share that gives the BERT-Large Ph1
   DP32 row the NeuronCore utilisation its tutorial reports (80 %).
2. ``COMPILER_EFFICIENCY`` (``emulator/costmodel/graph.py``): one factor on every graph's modelled
   device time, chosen so the two rows' emulated / published throughputs balance (their geometric
   mean is 1); the host share is re-fitted at every trial value.

Nothing else is fitted, and no other published figure is used (docs/parallel.md "Calibration").
``benchmarks/calibrate.py`` prints the fit; a test checks the constants in the code match it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from emulator.costmodel.graph import COMPILER_EFFICIENCY
from emulator.parallel.host import PUBLISHED_BERT_UTILIZATION, fit_host_seconds_per_op
from emulator.parallel.job import JobPlan, retimed


@dataclass(frozen=True)
class Fit:
    efficiency: float
    host_seconds_per_op: float
    bert_ratio: float  # emulated / published throughput with the fitted constants
    gpt_ratio: float
    bert_utilization: float


def _host_fit(plan: JobPlan, scale: float) -> float:
    """Per-op host time giving ``plan`` (a one-stage job) the published utilisation."""
    bare = retimed(plan, compute_scale=scale, host_per_op=0.0)
    slots = bare.timeline.stages[0].slots
    device = sum(s.end - s.start for s in slots)
    ops = sum(bare.stages[0].program.graphs[s.graph].device_ops for s in slots)
    return fit_host_seconds_per_op(device, ops, PUBLISHED_BERT_UTILIZATION)


def fit(bert: JobPlan, bert_published: float, gpt: JobPlan, gpt_published: float) -> Fit:
    """Bisection on the efficiency (throughput falls as it falls); plans made with any constants."""

    def ratios(efficiency: float) -> tuple[float, float, float, float]:
        scale = COMPILER_EFFICIENCY / efficiency  # the plans' compute times carry COMPILER_EFFICIENCY
        h = _host_fit(bert, scale)
        b = retimed(bert, compute_scale=scale, host_per_op=h)
        g = retimed(gpt, compute_scale=scale, host_per_op=h)
        return h, b.samples_per_second / bert_published, g.samples_per_second / gpt_published, b.utilization(0)

    lo, hi = 0.05, 1.5
    for _ in range(60):
        mid = (lo + hi) / 2
        _, rb, rg, _ = ratios(mid)
        if math.log(rb) + math.log(rg) > 0:
            hi = mid  # still too fast: lower efficiency
        else:
            lo = mid
    efficiency = (lo + hi) / 2
    h, rb, rg, util = ratios(efficiency)
    return Fit(efficiency, h, rb, rg, util)
