"""``neuron-emulator bench --recipes``: every model-scale model planned at its published Trn1
recipe (``emulator/workloads/models/recipes.py``), with whether it fits, its peak HBM per core,
throughput, step time, MFU, engine shares and the collective time left exposed."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from emulator.costmodel.sdk import era_of
from emulator.runtime.errors import NeuronRuntimeError
from emulator.workloads.summary import format_seconds

if TYPE_CHECKING:
    from emulator.hardware.instance_types import InstanceType

GIB = 2**30


def recipe_rows(
    instance: InstanceType, progress: Callable[[str], None] = lambda _: None, *, sdk: str | None = None
) -> list[dict[str, Any]]:
    """One row per model with a recipe, at the SDK release it was published with (or ``sdk``); a
    recipe that does not fit is a row saying why."""
    from emulator.parallel.runner import JobRequest, plan_request, withheld
    from emulator.workloads.models.recipes import RECIPES
    from emulator.workloads.models.zoo import MODELS

    rows: list[dict[str, Any]] = []
    for model in MODELS:
        recipe = RECIPES.get(model)
        if recipe is None:
            rows.append({"model": model, "recipe": None})
            continue
        progress(f"{model}: {recipe.label}")
        release = sdk or recipe.sdk
        row: dict[str, Any] = {"model": model, "recipe": recipe.label, "sdk": release, "nodes": recipe.nodes}
        try:
            request = JobRequest(model, published_scale=True, sdk=release)
            plan = plan_request(request, instance, env={}, progress=progress)
        except NeuronRuntimeError as exc:
            rows.append({**row, "fits": False, "error": exc.message})
            continue
        stages = list(plan.stages)
        row.update(
            fits=True,
            layout=plan.config.describe(),
            hbm_peak_bytes=max(plan.hbm_peak(s) for s in stages),
            emulated_seq_per_s=plan.samples_per_second,
            step_seconds=plan.step_seconds,
            mfu=plan.mfu,
            utilization=min(plan.utilization(s) for s in stages),
            engine_share=plan.engine_share(0),
            exposed_collectives=max(plan.collective_share(s) for s in stages),
            trace_seconds=plan.trace_seconds,
            withheld=withheld(request),
        )
        rows.append(row)
    return rows


def recipe_lines(rows: list[dict[str, Any]], capacity: int) -> list[str]:
    head = f"{'model':<14} {'nodes':>5} {'HBM peak':>10} {'seq/s':>9} {'step':>9} {'MFU':>6} {'CC exp.':>7}  layout"
    lines = [head]
    for r in rows:
        if r["recipe"] is None:
            lines.append(f"{r['model']:<14} no published Trn1 training recipe (docs/models.md §Recipes)")
            continue
        if not r["fits"]:
            lines.append(f"{r['model']:<14} {r['nodes']:>5} {'no fit':>10}  {r['error']}")
            continue
        peak = f"{r['hbm_peak_bytes'] / GIB:.1f} GiB"
        lines.append(
            f"{r['model']:<14} {r['nodes']:>5} {peak:>10} {r['emulated_seq_per_s']:>9,.2f} "
            f"{format_seconds(r['step_seconds']):>9} {r['mfu'] * 100:>5.1f}% {r['exposed_collectives'] * 100:>6.1f}%"
            f"  {r['layout']}"
        )
        engines = " ".join(f"{k} {v * 100:.0f}%" for k, v in r["engine_share"].items() if v > 0.005)
        era = era_of(r["sdk"]).release
        lines.append(
            f"{'':<14} engines (busy share, stage 0): {engines}; recipe: {r['recipe']} "
            f"(SDK {r['sdk']}{'' if era == r['sdk'] else f', modelled as the {era} era'})"
        )
        lines += [f"{'':<14} {text}: off" for text in r["withheld"]]
    lines.append(f"HBM per NeuronCore: {capacity / GIB:g} GiB; CC exp.: collective time no compute hides, per step")
    return lines
