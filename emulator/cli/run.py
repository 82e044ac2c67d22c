"""``neuron-emulator run NAME``: train a built-in workload on the emulated NeuronCores.

A real-math workload trains in this process (or in ``--nproc`` torchrun workers); a model-scale
model is planned (trace once, cost, schedule), then replayed on the daemon's NeuronCores, one rank
process per core (docs/parallel.md). Flag values are checked by the handler, not by argparse
types, so every bad value is the same one line on stderr (``neuron-emulator: error: ...``) and
exit status 1.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from emulator.cli.args import ArgumentError, Handler, core_ids, positive_int
from emulator.cli.layout import (
    add_multinode_arguments,
    add_parallel_arguments,
    forwarded_flags,
    node_targets,
    request_from_args,
)
from emulator.cli.training import add_training_arguments, config_from_args, run_environment, worker_argv
from emulator.parallel.plan import ConfigError
from emulator.runtime.errors import NeuronRuntimeError
from emulator.workloads import WORKLOADS
from emulator.workloads.config import RunConfig
from emulator.workloads.errors import report_error
from emulator.workloads.models.recipes import SWITCHES_OFF

if TYPE_CHECKING:
    from emulator.parallel.job import JobPlan


def add(sub: Any) -> dict[str, Handler]:
    run = sub.add_parser(
        "run",
        help="train a built-in workload on the emulated NeuronCores",
        description="Train a built-in workload on emulated NeuronCores (needs a running daemon).",
    )
    add_training_arguments(run)
    run.add_argument("--cores", metavar="SPEC", help="NeuronCores to use, e.g. 0, 0-3 or 0,1 (NEURON_RT_VISIBLE_CORES)")
    run.add_argument("--nproc", metavar="N", help="data-parallel processes via torchrun, one core each (default 1)")
    add_parallel_arguments(run)
    add_multinode_arguments(run)
    return {"run": cmd_run}


@contextmanager
def _environ(changes: Mapping[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _daemon_status() -> dict[str, Any]:
    """The daemon's ``/status``; one clear line if none answers (before building any model)."""
    from neurontools.sources.address import AddressError
    from neurontools.sources.daemon_client import DaemonClient, DaemonError, DaemonUnavailable

    try:
        return DaemonClient(timeout=3.0).get("/status")
    except AddressError as exc:
        raise ArgumentError(str(exc)) from None
    except DaemonUnavailable as exc:
        raise ArgumentError(str(exc)) from None
    except DaemonError as exc:
        raise ArgumentError(f"daemon refused: {exc}") from None


def _collective_timeout() -> float:
    from emulator.runtime.collectives import collective_timeout

    try:
        return collective_timeout()
    except ValueError as exc:
        raise ArgumentError(str(exc)) from None


def _fail(message: str) -> int:
    report_error(message)
    return 1


def _model_scale(name: str) -> bool:
    return name in WORKLOADS and not WORKLOADS[name].real_math


_PARALLEL_FLAGS = ("tp", "pp", "micro_batch", "global_batch", "schedule")


def cmd_run(args: argparse.Namespace) -> int:
    """``neuron-emulator run``: SIGINT, SIGTERM or SIGHUP stops every process it started and
    returns 128 + the signal (docs/lifecycle.md)."""
    from emulator.lifecycle import Stopped, stop_on_signals

    with stop_on_signals():
        try:
            return _cmd_run(args)
        except Stopped as stopped:
            return stopped.status


def _cmd_run(args: argparse.Namespace) -> int:
    if _model_scale(args.workload):
        return _run_model_scale(args)
    try:
        config, nproc = _real_math_run(args)
        changes = run_environment(args, os.environ)
    except ArgumentError as exc:
        return _fail(str(exc))
    if nproc == 1:
        from emulator.workloads.runner import run

        with _environ(changes):
            return run(config)

    from emulator.workloads.launch import launch

    worker = worker_argv(config)
    if args.auto_cast is not None:
        worker += ["--auto-cast", args.auto_cast]
    return launch(nproc, worker, {**os.environ, **changes})


def _real_math_run(args: argparse.Namespace) -> tuple[RunConfig, int]:
    """The checked run of a real-math workload and its process count; ArgumentError otherwise."""
    used = [f"--{f.replace('_', '-')}" for f in _PARALLEL_FLAGS if getattr(args, f, None) is not None]
    used += [f"--{f.replace('_', '-')}" for f in SWITCHES_OFF if getattr(args, f, None) is not None]
    if used:
        raise ArgumentError(
            f"{' '.join(used)}: tensor/pipeline layouts are for model-scale workloads; "
            f"{args.workload} is a real-math workload (use --dp or --nproc for data parallel)"
        )
    if args.dp is not None:
        if args.nproc is not None and args.nproc != args.dp:
            raise ArgumentError("--dp and --nproc disagree (for a real-math workload they are the same)")
        args.nproc = args.dp
    config = config_from_args(args)
    cores = core_ids(args.cores)
    nproc = positive_int("--nproc", args.nproc) or 1
    if cores is not None and nproc > 1 and len(cores) < nproc:
        raise ArgumentError(
            f"--cores {args.cores} has {len(cores)} NeuronCore(s) but --nproc {nproc} needs one per process"
        )
    status = _daemon_status()
    total = int(status.get("neuroncores_total") or 0)
    itype = status.get("instance_type", "instance")
    if total and nproc > total:
        raise ArgumentError(f"--nproc {nproc}: the emulated {itype} has {total} NeuronCores")
    if total and cores is not None and cores[-1] >= total:
        raise ArgumentError(f"--cores {args.cores}: the emulated {itype} has NeuronCores 0-{total - 1}")
    if nproc > 1:
        _collective_timeout()
    return config, nproc


def _run_model_scale(args: argparse.Namespace) -> int:
    """A model-scale model: plan the parallel job, then replay it on every core it uses (on the
    nodes of ``--nodes``: docs/multinode.md)."""
    try:
        for flag in ("cores", "nproc", "lr"):
            if getattr(args, flag, None) is not None:
                raise ArgumentError(
                    f"--{flag}: model-scale jobs are laid out with --tp/--pp/--dp and take every core they need"
                )
        targets = node_targets(args)
        if targets.instance_type is not None:  # a cluster's nodes: its instance type
            instance_type = targets.instance_type
        else:
            instance_type = str(_daemon_status().get("instance_type", "trn1.2xlarge"))
    except (ArgumentError, ConfigError) as exc:
        return _fail(str(exc))
    return _run_parallel(args, instance_type, targets)


def _run_parallel(args: argparse.Namespace, instance_type: str, targets: Any) -> int:
    """Plan and run a model-scale job on the daemon's instance, or on the nodes of ``targets``
    (:class:`~emulator.parallel.nodes.NodeTargets`)."""
    from emulator.hardware import get_instance_type
    from emulator.parallel.launch import launch
    from emulator.parallel.report import ParallelReport
    from emulator.parallel.runner import plan_request, recipe_defaults, withheld

    instance = get_instance_type(instance_type)
    try:
        request = request_from_args(args, args.workload)
        steps = positive_int("--steps", args.steps)
        per_process = positive_int("--ranks-per-process", getattr(args, "ranks_per_process", None)) or 1
        plan = plan_request(request, instance, progress=lambda text: print(text + " ...", flush=True))
    except (ArgumentError, ConfigError, NeuronRuntimeError) as exc:  # or the shard does not fit its NeuronCore
        report_error(str(exc))
        return 1
    report = ParallelReport(plan, steps or WORKLOADS[plan.model].steps)
    report.header()
    _print_notes(plan, recipe_defaults(request), per_process)
    for line in withheld(request):
        print(f"  {line}: off", flush=True)
    code = launch(
        plan,
        steps=report.steps,
        flags=forwarded_flags(args),
        env=dict(os.environ),
        on_step=report.step,
        targets=targets,
        ranks_per_process=per_process,
    )
    if code == 0:
        report.summary()
    return code


def _print_notes(plan: JobPlan, recipe: list[str], per_process: int) -> None:
    """Below the header: the settings the model's published recipe turned on, and the processes
    that hold several ranks each."""
    if recipe:
        from emulator.workloads.models.recipes import RECIPES

        names = {
            "zero1": "ZeRO-1",
            "sequence_parallel": "sequence parallelism",
            "recompute": f"{plan.config.recompute} recomputation",
            "recompute_mlp": f"MLP {plan.config.recompute_mlp} recomputation",
            "flash_attention": "flash attention",
            "master_weights": "FP32 master weights",
        }
        offs = " / ".join(
            "--recompute-mlp none" if r == "recompute_mlp" else "--no-" + r.replace("_", "-") for r in recipe
        )
        print(
            f"  {', '.join(names[r] for r in recipe)} on as in the published recipe "
            f"({RECIPES[plan.model].label}); {offs} to turn off",
            flush=True,
        )
    if per_process > 1:
        from emulator.parallel.launch import rank_groups

        groups = rank_groups(list(plan.places), per_process)
        print(
            f"  {per_process} ranks per process: {len(groups)} processes hold the job's {plan.config.world} cores "
            "(docs/multinode.md)",
            flush=True,
        )
