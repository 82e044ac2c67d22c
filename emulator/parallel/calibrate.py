"""Re-fit the emulator's fitted constants on the published calibration rows (docs/parallel.md
§Host share and calibration).

1. ``HOST_SECONDS_PER_DEVICE_OP`` (``host.py``): the host share that gives the BERT-Large Ph1
   DP32 row the NeuronCore utilisation its tutorial reports (80 %); re-fitted at every trial value
   of the 2.3 era's efficiency, and the same for every era (the host, not the compiler).
2. One compiler efficiency per SDK era (``emulator/costmodel/sdk.py``): one factor on every
   graph's modelled device time, chosen so that era's own rows' emulated / published throughputs
   balance (their geometric mean is 1).

Nothing else is fitted, and no other published figure is used. ``benchmarks/calibrate.py`` prints
the fit; a test checks the constants in the code match it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from emulator.costmodel.sdk import era_of
from emulator.parallel.host import PUBLISHED_BERT_UTILIZATION, fit_host_seconds_per_op
from emulator.parallel.job import JobPlan, retimed


@dataclass(frozen=True)
class Row:
    name: str
    plan: JobPlan  # planned with any constants
    published: float  # samples/s


@dataclass(frozen=True)
class EraFit:
    release: str
    efficiency: float
    host_seconds_per_op: float
    ratios: dict[str, float]  # row -> emulated / published throughput with the fitted constants
    host_utilization: float | None  # the BERT row's utilisation, when the host share was fitted here


def _host_fit(plan: JobPlan, scale: float) -> float:
    """Per-op host time giving ``plan`` (a one-stage job) the published utilisation."""
    bare = retimed(plan, compute_scale=scale, host_per_op=0.0)
    slots = bare.timeline.stages[0].slots
    device = sum(s.end - s.start for s in slots)
    ops = sum(bare.stages[0].program.graphs[s.graph].device_ops for s in slots)
    return fit_host_seconds_per_op(device, ops, PUBLISHED_BERT_UTILIZATION)


def _scale(plan: JobPlan, efficiency: float) -> float:
    """Compute-time factor taking ``plan`` (costed at its era's efficiency) to ``efficiency``."""
    return era_of(plan.options.sdk).efficiency / efficiency


def fit_era(release: str, rows: Sequence[Row], *, host_row: Row | None = None, host_per_op: float = 0.0) -> EraFit:
    """Bisection on the era's efficiency (throughput falls as it falls). With ``host_row`` the host
    share is re-fitted on it at every trial value (the 2.3 era), else ``host_per_op`` is used."""

    def trial(efficiency: float) -> tuple[float, dict[str, float], float | None]:
        h = host_per_op if host_row is None else _host_fit(host_row.plan, _scale(host_row.plan, efficiency))
        ratios, util = {}, None
        for row in rows:
            plan = retimed(row.plan, compute_scale=_scale(row.plan, efficiency), host_per_op=h)
            ratios[row.name] = plan.samples_per_second / row.published
            if host_row is not None and row is host_row:
                util = plan.utilization(0)
        return h, ratios, util

    lo, hi = 0.05, 1.5
    for _ in range(50):
        mid = (lo + hi) / 2
        _, ratios, _ = trial(mid)
        if sum(math.log(r) for r in ratios.values()) > 0:
            hi = mid  # still too fast: lower efficiency
        else:
            lo = mid
    efficiency = (lo + hi) / 2
    h, ratios, util = trial(efficiency)
    return EraFit(release, efficiency, h, ratios, util)
