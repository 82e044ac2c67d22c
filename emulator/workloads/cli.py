"""``neuron-emulator run`` and ``neuron-emulator workloads``: argparse subcommands for the
integrator to add to ``emulator.cli`` with :func:`add_subcommands`.

Flag values are parsed here, not by argparse types, so that every bad value gets the same one
line on stderr (``neuron-emulator: error: ...``) and exit status 1 from the handler.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from emulator.workloads import AUTO_CAST, DTYPES, WORKLOADS, UnknownWorkload, WorkloadSpec, get_workload
from emulator.workloads.config import RunConfig
from emulator.workloads.errors import report_error

Handler = Callable[[argparse.Namespace], int]


class ArgumentError(ValueError):
    """A bad flag value: one line for stderr."""


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags shared by ``run`` and the torchrun worker."""
    parser.add_argument("workload", metavar="NAME", help="workload to train (see 'neuron-emulator workloads')")
    parser.add_argument("--steps", metavar="N", help="optimizer steps (default: per workload)")
    parser.add_argument("--batch-size", metavar="B", help="micro-batch per rank (default: per workload)")
    parser.add_argument("--seq-len", metavar="L", help="sequence length, up to the model's maximum")
    parser.add_argument("--dtype", metavar="T", help=f"parameter and input dtype: {', '.join(DTYPES)}")
    parser.add_argument("--lr", metavar="LR", help="AdamW learning rate (default: per workload)")
    parser.add_argument(
        "--auto-cast",
        metavar="MODE",
        help=f"compiler auto-cast: {', '.join(AUTO_CAST)} (passed as NEURON_CC_FLAGS='--auto-cast MODE')",
    )


def add_subcommands(subparsers: Any) -> dict[str, Handler]:
    """Add ``run`` and ``workloads`` to an argparse subparsers object; return their handlers."""
    run = subparsers.add_parser(
        "run",
        help="train a built-in workload on the emulated NeuronCores",
        description="Train a built-in workload on emulated NeuronCores (needs a running daemon).",
    )
    add_training_arguments(run)
    run.add_argument("--cores", metavar="SPEC", help="NeuronCores to use, e.g. 0, 0-3 or 0,1 (NEURON_RT_VISIBLE_CORES)")
    run.add_argument("--nproc", metavar="N", help="data-parallel processes via torchrun, one core each (default 1)")
    from emulator.parallel.cli import add_bench_arguments, add_multinode_arguments, add_parallel_arguments, cmd_bench

    add_parallel_arguments(run)
    add_multinode_arguments(run)
    subparsers.add_parser("workloads", help="list the built-in workloads", description="List the built-in workloads.")
    bench = subparsers.add_parser(
        "bench",
        help="predict training throughput of the published Trn1 rows (or one configuration), no daemon needed",
        description="Plan model-scale jobs exactly as 'run' does (trace, cost model, collectives, schedule) "
        "and print throughput, step time, MFU and engine shares with simulated time fast-forwarded.",
    )
    add_bench_arguments(bench)
    return {"run": cmd_run, "workloads": cmd_workloads, "bench": cmd_bench}


# ------------------------------------------------------------------------------------------------
def _positive_int(flag: str, text: str | None) -> int | None:
    if text is None:
        return None
    value = text.strip()
    # ASCII digits only ('²'.isdigit() is true), and few enough for int() (docs/fuzzing.md)
    if not (value.isascii() and value.isdigit()) or len(value) > 18 or int(value) < 1:
        raise ArgumentError(f"{flag} {text[:40]!r}: expected a positive integer")
    return int(value)


def _positive_float(flag: str, text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ArgumentError(f"{flag} {text!r}: expected a positive number like 0.001 or 3e-4") from None
    if not math.isfinite(value) or value <= 0:
        raise ArgumentError(f"{flag} {text!r}: expected a positive number like 0.001 or 3e-4")
    return value


def _choice(flag: str, text: str | None, choices: tuple[str, ...]) -> str | None:
    if text is None:
        return None
    if text not in choices:
        raise ArgumentError(f"{flag} {text!r}: expected one of {', '.join(choices)}")
    return text


def _seq_len(spec: WorkloadSpec, text: str | None) -> int | None:
    value = _positive_int("--seq-len", text)
    if value is None:
        return spec.seq_len
    if spec.max_seq_len is None:
        raise ArgumentError(f"--seq-len {text!r}: workload {spec.name} has no sequence dimension")
    if value > spec.max_seq_len:
        raise ArgumentError(f"--seq-len {value}: workload {spec.name} accepts at most {spec.max_seq_len}")
    return value


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """Validate the training flags; raises :class:`ArgumentError` (or UnknownWorkload) with one line."""
    try:
        spec = get_workload(args.workload)
    except UnknownWorkload as exc:
        raise ArgumentError(str(exc)) from None
    steps = _positive_int("--steps", args.steps)
    batch_size = _positive_int("--batch-size", args.batch_size)
    seq_len = _seq_len(spec, args.seq_len)
    dtype = _choice("--dtype", args.dtype, DTYPES)
    lr = _positive_float("--lr", args.lr)
    _choice("--auto-cast", args.auto_cast, AUTO_CAST)
    return RunConfig.defaults(spec, steps=steps, batch_size=batch_size, seq_len=seq_len, dtype=dtype, lr=lr)


def _core_ids(text: str | None) -> list[int] | None:
    if text is None:
        return None
    from emulator.runtime.core_spec import CoreSpecError, parse_core_ids

    try:
        return parse_core_ids(text, name="--cores")
    except CoreSpecError as exc:
        raise ArgumentError(str(exc)) from None


def with_auto_cast(flags: str, mode: str) -> str:
    """``NEURON_CC_FLAGS`` with its ``--auto-cast`` option replaced by ``mode``."""
    try:
        words = shlex.split(flags)
    except ValueError as exc:
        raise ArgumentError(f"NEURON_CC_FLAGS cannot be parsed: {exc}") from None
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        if word == "--auto-cast":
            skip = True
            continue
        if word.startswith("--auto-cast="):
            continue
        kept.append(word)
    return shlex.join([*kept, "--auto-cast", mode])


def run_environment(args: argparse.Namespace, base: Mapping[str, str]) -> dict[str, str]:
    """The environment changes a run makes: core selection and compiler flags."""
    changes: dict[str, str] = {}
    if getattr(args, "cores", None) is not None:
        changes["NEURON_RT_VISIBLE_CORES"] = args.cores.strip()
    if args.auto_cast is not None:
        changes["NEURON_CC_FLAGS"] = with_auto_cast(base.get("NEURON_CC_FLAGS", ""), args.auto_cast)
    return changes


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


def worker_argv(config: RunConfig) -> list[str]:
    """Flags that make a worker train exactly ``config``."""
    argv = [config.spec.name, "--steps", str(config.steps), "--batch-size", str(config.batch_size)]
    if config.seq_len is not None:
        argv += ["--seq-len", str(config.seq_len)]
    return [*argv, "--dtype", config.dtype, "--lr", repr(config.lr)]


def _fail(message: str) -> int:
    report_error(message)
    return 1


def _model_scale(name: str) -> bool:
    from emulator.parallel.runner import model_names

    return name in model_names()


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
        used = [f"--{f.replace('_', '-')}" for f in _PARALLEL_FLAGS if getattr(args, f, None) is not None]
        used += [f"--{f.replace('_', '-')}" for f in ("zero1", "recompute", "sequence_parallel") if getattr(args, f)]
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
        cores = _core_ids(args.cores)
        nproc = _positive_int("--nproc", args.nproc) or 1
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
    except ArgumentError as exc:
        return _fail(str(exc))

    try:
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


def _run_model_scale(args: argparse.Namespace) -> int:
    """A model-scale model: plan the parallel job, then replay it on every core it uses (on the
    nodes of ``--nodes``: docs/multinode.md)."""
    from emulator.parallel.cli import cmd_run_parallel, node_targets
    from emulator.parallel.plan import ConfigError

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
    return cmd_run_parallel(args, instance_type, targets)


def workload_lines(workloads: Mapping[str, WorkloadSpec] = WORKLOADS) -> list[str]:
    rows = [("NAME", "KIND", "DEFAULTS", "DESCRIPTION")]
    for spec in workloads.values():
        shape = f"batch {spec.batch_size}" + (f" x seq {spec.seq_len}" if spec.seq_len else "")
        defaults = f"{spec.steps} steps, {shape}, {spec.dtype}"
        rows.append((spec.name, spec.kind, defaults, spec.description))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}" for r in rows]


def cmd_workloads(args: argparse.Namespace) -> int:
    for line in workload_lines(all_workloads()):
        print(line)
    return 0


def all_workloads() -> dict[str, WorkloadSpec]:
    """The real-math workloads and every model-scale model of the zoo (imports torch)."""
    from emulator.workloads import MODEL_SCALE
    from emulator.workloads.models.zoo import MODELS

    out = {name: spec for name, spec in WORKLOADS.items() if spec.real_math}
    for m in MODELS.values():
        out[m.name] = WorkloadSpec(
            name=m.name,
            description=m.description,
            kind=MODEL_SCALE,
            steps=10,
            batch_size=1,
            seq_len=m.default_seq_len,
            max_seq_len=m.max_seq_len,
            dtype="bf16",
            lr=1e-4,
            sample_unit=m.sample_unit,
            builder="",
        )
    return out
