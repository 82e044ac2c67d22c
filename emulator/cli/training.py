"""The training flags of ``neuron-emulator run`` and of its torchrun worker (one rank of a
data-parallel run): the flags, their checks into a :class:`RunConfig`, and the environment a run
sets (core selection, compiler auto-cast)."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Mapping

from emulator.cli.args import ArgumentError, choice, positive_float, positive_int
from emulator.workloads import AUTO_CAST, DTYPES, UnknownWorkload, WorkloadSpec, get_workload
from emulator.workloads.config import RunConfig


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


def _seq_len(spec: WorkloadSpec, text: str | None) -> int | None:
    value = positive_int("--seq-len", text)
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
    steps = positive_int("--steps", args.steps)
    batch_size = positive_int("--batch-size", args.batch_size)
    seq_len = _seq_len(spec, args.seq_len)
    dtype = choice("--dtype", args.dtype, DTYPES)
    lr = positive_float("--lr", args.lr)
    choice("--auto-cast", args.auto_cast, AUTO_CAST)
    return RunConfig.defaults(spec, steps=steps, batch_size=batch_size, seq_len=seq_len, dtype=dtype, lr=lr)


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


def worker_argv(config: RunConfig) -> list[str]:
    """Flags that make a worker train exactly ``config``."""
    argv = [config.spec.name, "--steps", str(config.steps), "--batch-size", str(config.batch_size)]
    if config.seq_len is not None:
        argv += ["--seq-len", str(config.seq_len)]
    return [*argv, "--dtype", config.dtype, "--lr", repr(config.lr)]
