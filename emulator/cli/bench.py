"""``neuron-emulator bench``: plan the published single-node configurations (or any one
configuration) exactly as ``run`` does — trace once, cost, schedule — and print throughput, step
time, MFU and engine shares without a daemon and without waiting: simulated time is fast-forwarded."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from emulator.cli.args import ArgumentError, Handler
from emulator.cli.layout import add_parallel_arguments, request_from_args
from emulator.parallel.plan import ConfigError
from emulator.runtime.errors import NeuronRuntimeError
from emulator.workloads.errors import report_error

if TYPE_CHECKING:
    from emulator.hardware.instance_types import InstanceType
    from emulator.parallel.job import JobPlan


def add(sub: Any) -> dict[str, Handler]:
    bench = sub.add_parser(
        "bench",
        help="predict training throughput of the published Trn1 rows (or one configuration), no daemon needed",
        description="Plan model-scale jobs exactly as 'run' does (trace, cost model, collectives, schedule) "
        "and print throughput, step time, MFU and engine shares with simulated time fast-forwarded.",
    )
    bench.add_argument("model", nargs="?", metavar="MODEL", help="one model-scale model (default: the published rows)")
    bench.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    bench.add_argument(
        "--recipes",
        action="store_true",
        help="every model-scale model at its published Trn1 recipe: fits, peak HBM, throughput, MFU",
    )
    bench.add_argument("--instance-type", "-i", default="trn1.32xlarge", metavar="TYPE", help="emulated instance")
    bench.add_argument("--nodes", metavar="N", help="instances the job spans (default 1)")
    bench.add_argument("--seq-len", metavar="L", help="sequence length (default: per model)")
    bench.add_argument("--dtype", metavar="T", help="parameter dtype: bf16 (default), fp32, fp16")
    bench.add_argument("--auto-cast", metavar="MODE", help="compiler auto-cast: none, matmult, all")
    add_parallel_arguments(bench)
    return {"bench": cmd_bench}


def bench_row(name: str, plan: JobPlan, published: float | None) -> dict[str, Any]:
    """The row ``bench`` prints for one planned job (``--json``: one element of the list).
    ``engine_share`` is stage 0's (:meth:`JobPlan.engine_share`)."""
    stage = 0
    return {
        "name": name,
        "model": plan.model,
        "layout": plan.config.describe(),
        "dtype": plan.dtype,
        "sdk": plan.options.sdk,
        "emulated_seq_per_s": plan.samples_per_second,
        "published_seq_per_s": published,
        "ratio": None if not published else plan.samples_per_second / published,
        "step_seconds": plan.step_seconds,
        "mfu": plan.mfu,
        "utilization": {str(s): plan.utilization(s) for s in plan.stages},
        "bubble": {str(s): plan.timeline.bubble(s) for s in plan.stages},
        "engine_share": plan.engine_share(stage),
        "exposed_collectives": max(plan.collective_share(s) for s in plan.stages),
        "hbm_peak_bytes": {str(s): plan.hbm_peak(s) for s in plan.stages},
        "trace_seconds": plan.trace_seconds,
    }


def plan_model(
    args: argparse.Namespace, instance: InstanceType, progress: Callable[[str], None] = lambda _: None
) -> tuple[JobPlan, dict[str, Any]]:
    """``bench MODEL [layout flags]``: the job planned as ``run`` plans it, and its row."""
    from emulator.parallel.runner import plan_request

    plan = plan_request(request_from_args(args, args.model, published_scale=True), instance, progress=progress)
    return plan, bench_row(args.model, plan, None)


def cmd_bench(args: argparse.Namespace) -> int:
    from emulator.hardware import get_instance_type
    from emulator.parallel.published import PUBLISHED_ROWS
    from emulator.parallel.runner import plan_request

    try:
        instance = get_instance_type(args.instance_type)
    except (KeyError, ValueError):
        report_error(f"--instance-type {args.instance_type!r}: unknown instance type")
        return 1
    progress = (lambda _: None) if args.json else (lambda text: print(text + " ...", file=sys.stderr, flush=True))
    if args.recipes:
        return _recipes(args, instance, progress)
    if args.sdk and not args.model:
        report_error("--sdk goes with MODEL or --recipes (each published row has its own release)")
        return 1
    rows: list[dict[str, Any]] = []
    try:
        if args.model:
            rows.append(plan_model(args, instance, progress)[1])
        else:
            for row in PUBLISHED_ROWS:
                progress(row.name)
                plan = plan_request(row.request, instance, env={}, progress=progress)
                rows.append(bench_row(row.name, plan, row.published_seq_per_s))
    except (ArgumentError, ConfigError, NeuronRuntimeError) as exc:
        report_error(str(exc))
        return 1
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from emulator.parallel.report import bench_lines

    for line in bench_lines(rows, nccom=not args.model):
        print(line)
    return 0


def _recipes(args: argparse.Namespace, instance: InstanceType, progress: Callable[[str], None]) -> int:
    from emulator.cli.bench_recipes import recipe_lines, recipe_rows

    if args.model:
        report_error("--recipes plans every model's recipe; leave out MODEL (or drop --recipes)")
        return 1
    try:
        rows = recipe_rows(instance, progress, sdk=args.sdk)
    except ConfigError as exc:
        report_error(str(exc))
        return 1
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for line in recipe_lines(rows, instance.core_memory_bytes):
        print(line)
    return 0
