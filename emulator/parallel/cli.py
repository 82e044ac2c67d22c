"""``neuron-emulator run`` for model-scale models, and ``neuron-emulator bench``.

``run`` plans the job (trace once, cost, schedule), then replays it on the daemon's NeuronCores,
one rank process per core. ``bench`` plans the published single-node configurations (or any one
configuration) the same way and prints throughput, step time, MFU and engine shares without a
daemon and without waiting: simulated time is fast-forwarded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from emulator.parallel.plan import ConfigError
from emulator.runtime.errors import NeuronRuntimeError
from emulator.workloads.errors import report_error


def add_parallel_arguments(parser: argparse.ArgumentParser) -> None:
    """The layout flags of ``run`` and ``bench`` (model-scale workloads)."""
    g = parser.add_argument_group("parallel training (model-scale workloads)")
    g.add_argument("--tp", metavar="N", help="tensor-parallel degree (default 1)")
    g.add_argument("--pp", metavar="N", help="pipeline-parallel stages (default 1)")
    g.add_argument("--dp", metavar="N", help="data-parallel replicas (default: fill the instance's cores)")
    g.add_argument("--micro-batch", metavar="B", help="micro-batch per data-parallel rank (default 1)")
    g.add_argument("--global-batch", metavar="G", help="global batch = micro-batch x dp x accumulation")
    g.add_argument(
        "--zero1",
        action=argparse.BooleanOptionalAction,
        help="shard the optimizer state over the data-parallel group (default: as the model's published recipe)",
    )
    g.add_argument("--recompute", action="store_true", help="recompute activations in the backward pass")
    g.add_argument(
        "--sequence-parallel",
        action=argparse.BooleanOptionalAction,
        help="Megatron sequence parallelism (needs --tp; default: as the model's published recipe)",
    )
    g.add_argument("--schedule", metavar="S", help="pipeline schedule: 1f1b (default) or gpipe")


def add_multinode_arguments(parser: argparse.ArgumentParser) -> None:
    """``run``'s flags for a job over several instances (docs/multinode.md)."""
    g = parser.add_argument_group("multi-node jobs (model-scale workloads)")
    g.add_argument(
        "--nodes",
        metavar="N",
        help="instances the job spans (default 1): nodes 0..N-1 of the running 'neuron-emulator cluster', "
        "or, with --node-rank, one launcher per host",
    )
    g.add_argument("--node-rank", metavar="R", help="this host's node in a job with one launcher per host")
    g.add_argument(
        "--master-addr",
        metavar="HOST",
        help="with --node-rank: host of node 0's launcher (its c10d store; default 127.0.0.1)",
    )
    g.add_argument("--master-port", metavar="PORT", help="with --node-rank: port of the c10d store on node 0")
    g.add_argument(
        "--ranks-per-process",
        metavar="K",
        help="replay K ranks of a node in one process holding their K cores (default 1: a process per rank, "
        "as torchrun starts them); for fleets too large for a process per rank",
    )


def node_targets(args: argparse.Namespace):  # -> NodeTargets
    """Where the job's nodes are: the daemon of NEURON_EMULATOR_ADDR (one node), the running
    cluster's nodes (``--nodes N``), or this host's node (``--nodes N --node-rank R``)."""
    from emulator.parallel.nodes import cluster_targets, host_targets, single_node
    from neurontools.sources.address import AddressError, resolve_address

    nodes = _int("--nodes", getattr(args, "nodes", None), 1) or 1
    rank_text = getattr(args, "node_rank", None)
    port_text = getattr(args, "master_port", None)
    addr = getattr(args, "master_addr", None)
    if rank_text is None:
        if port_text is not None or addr is not None:
            raise ConfigError("--master-addr and --master-port go with --node-rank (one launcher per host)")
        if nodes > 1:
            return cluster_targets(nodes)
    try:
        address = str(resolve_address(None))
    except AddressError as exc:
        raise ConfigError(str(exc)) from None
    if rank_text is None:
        return single_node(address)
    try:
        node_rank = int(rank_text)
    except ValueError:
        raise ConfigError(f"--node-rank {rank_text!r}: expected an integer") from None
    if port_text is None:
        raise ConfigError("--node-rank needs --master-port (and --master-addr unless node 0 is this host)")
    port = _int("--master-port", port_text, None) or 0
    return host_targets(nodes, node_rank, addr or "127.0.0.1", port, address)


def _int(flag: str, text: str | None, default: int | None) -> int | None:
    from emulator.workloads.cli import ArgumentError, _positive_int

    try:
        value = _positive_int(flag, text)
    except ArgumentError as exc:
        raise ConfigError(str(exc)) from None
    return default if value is None else value


def request_from_args(args: argparse.Namespace, model: str):  # -> JobRequest
    from emulator.parallel.runner import JobRequest
    from emulator.workloads import DTYPES

    micro = _int("--micro-batch", getattr(args, "micro_batch", None), None)
    legacy = _int("--batch-size", getattr(args, "batch_size", None), None)
    if micro is not None and legacy is not None and micro != legacy:
        raise ConfigError("--micro-batch and --batch-size disagree (they are the same setting)")
    dtype = getattr(args, "dtype", None) or "bf16"
    if dtype not in DTYPES:
        raise ConfigError(f"--dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    return JobRequest(
        model=model,
        tp=_int("--tp", args.tp, 1) or 1,
        pp=_int("--pp", args.pp, 1) or 1,
        dp=_int("--dp", args.dp, None),
        micro_batch=micro or legacy,
        global_batch=_int("--global-batch", args.global_batch, None),
        seq_len=_int("--seq-len", getattr(args, "seq_len", None), None),
        nodes=_int("--nodes", getattr(args, "nodes", None), 1) or 1,
        zero1=args.zero1,
        recompute=bool(args.recompute),
        sequence_parallel=args.sequence_parallel,
        schedule=(args.schedule or "1f1b").lower(),
        dtype=dtype,
        auto_cast=getattr(args, "auto_cast", None),
    )


def forwarded_flags(args: argparse.Namespace) -> list[str]:
    """The flags a rank's command line shows (the same for every rank, as under torchrun)."""
    out: list[str] = []
    for flag in ("tp", "pp", "dp", "micro_batch", "global_batch", "seq_len", "steps", "dtype", "schedule", "nodes"):
        value = getattr(args, flag, None)
        if value is not None:
            out += ["--" + flag.replace("_", "-"), str(value)]
    if getattr(args, "recompute", False):
        out.append("--recompute")
    for flag in ("zero1", "sequence_parallel"):  # on, off, or (None) as the model's recipe has it
        value = getattr(args, flag, None)
        if value is not None:
            out.append(("--" if value else "--no-") + flag.replace("_", "-"))
    return out


# ------------------------------------------------------------------------------------------------
def cmd_run_parallel(args: argparse.Namespace, instance_type: str, targets: Any = None) -> int:
    """Plan and run a model-scale job on the daemon's instance, or on the nodes of ``targets``
    (:class:`~emulator.parallel.nodes.NodeTargets`)."""
    from emulator.hardware import get_instance_type
    from emulator.parallel.launch import launch
    from emulator.parallel.report import ParallelReport
    from emulator.parallel.runner import plan_request, recipe_defaults

    instance = get_instance_type(instance_type)
    try:
        request = request_from_args(args, args.workload)
        steps = _int("--steps", args.steps, None)
        per_process = _int("--ranks-per-process", getattr(args, "ranks_per_process", None), 1) or 1
        plan = plan_request(request, instance, progress=lambda text: print(text + " ...", flush=True))
    except ConfigError as exc:
        report_error(str(exc))
        return 1
    except NeuronRuntimeError as exc:  # the shard does not fit its NeuronCore
        report_error(str(exc))
        return 1
    report = ParallelReport(plan, steps or 10)
    report.header()
    recipe = recipe_defaults(request)
    if recipe:
        from emulator.workloads.models.zoo import MODELS

        names = {"zero1": "ZeRO-1", "sequence_parallel": "sequence parallelism"}
        offs = " / ".join("--no-" + r.replace("_", "-") for r in recipe)
        print(
            f"  {' and '.join(names[r] for r in recipe)} on as in the published recipe "
            f"({MODELS[plan.model].recipe_source}); {offs} to turn off",
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


@dataclass(frozen=True)
class PublishedRow:
    """A published Trn1 training result the emulator is checked against
    (docs/parallel.md §Host share and calibration)."""

    name: str
    model: str
    tp: int
    pp: int
    dp: int
    micro_batch: int
    global_batch: int
    seq_len: int
    dtype: str
    auto_cast: str | None
    published_seq_per_s: float | None
    source: str


_SDK23 = "Neuron SDK 2.3 tutorials and the re:Invent 2022 Trainium deck (docs/parallel.md)"
PUBLISHED_ROWS = (
    PublishedRow("BERT-Large Ph1 DP32 BF16+SR", "bert-large", 1, 1, 32, 16, 16384, 128, "bf16", None, 2846, _SDK23),
    PublishedRow("GPT3-6.7B TP8xDP4 BF16+SR", "gpt3-6.7b", 8, 1, 4, 1, 64, 2048, "bf16", None, 7.3, _SDK23),
    # the FP32 row only gives the BF16/FP32 ratio; SDK 2.3 auto-cast FP32 matmuls to BF16 by default
    PublishedRow("BERT-Large Ph1 DP32 FP32", "bert-large", 1, 1, 32, 16, 16384, 128, "fp32", "matmult", 1864, _SDK23),
)


def published_request(row: PublishedRow):  # -> JobRequest
    from emulator.parallel.runner import JobRequest

    return JobRequest(
        model=row.model,
        tp=row.tp,
        pp=row.pp,
        dp=row.dp,
        micro_batch=row.micro_batch,
        global_batch=row.global_batch,
        seq_len=row.seq_len,
        dtype=row.dtype,
        auto_cast=row.auto_cast,
    )


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", metavar="MODEL", help="one model-scale model (default: the published rows)")
    parser.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    parser.add_argument("--instance-type", "-i", default="trn1.32xlarge", metavar="TYPE", help="emulated instance")
    parser.add_argument("--nodes", metavar="N", help="instances the job spans (default 1)")
    parser.add_argument("--seq-len", metavar="L", help="sequence length (default: per model)")
    parser.add_argument("--dtype", metavar="T", help="parameter dtype: bf16 (default), fp32, fp16")
    parser.add_argument("--auto-cast", metavar="MODE", help="compiler auto-cast: none, matmult, all")
    add_parallel_arguments(parser)


def _row_result(name: str, plan: Any, published: float | None) -> dict[str, Any]:
    stage = 0
    return {
        "name": name,
        "model": plan.model,
        "layout": plan.config.describe(),
        "dtype": plan.dtype,
        "emulated_seq_per_s": plan.samples_per_second,
        "published_seq_per_s": published,
        "ratio": None if not published else plan.samples_per_second / published,
        "step_seconds": plan.step_seconds,
        "mfu": plan.mfu,
        "utilization": {str(s): plan.utilization(s) for s in plan.stages},
        "bubble": {str(s): plan.timeline.bubble(s) for s in plan.stages},
        "engine_share": plan.engine_share(stage),
        "hbm_peak_bytes": {str(s): plan.hbm_peak(s) for s in plan.stages},
        "trace_seconds": plan.trace_seconds,
    }


def cmd_bench(args: argparse.Namespace) -> int:
    from emulator.hardware import get_instance_type
    from emulator.parallel.runner import plan_request

    try:
        instance = get_instance_type(args.instance_type)
    except (KeyError, ValueError):
        report_error(f"--instance-type {args.instance_type!r}: unknown instance type")
        return 1
    progress = (lambda _: None) if args.json else (lambda text: print(text + " ...", file=sys.stderr, flush=True))
    rows: list[dict[str, Any]] = []
    try:
        if args.model:
            request = request_from_args(args, args.model)
            rows.append(_row_result(args.model, plan_request(request, instance, progress=progress), None))
        else:
            for row in PUBLISHED_ROWS:
                progress(row.name)
                plan = plan_request(published_request(row), instance, env={}, progress=progress)
                rows.append(_row_result(row.name, plan, row.published_seq_per_s))
    except (ConfigError, NeuronRuntimeError) as exc:
        report_error(str(exc))
        return 1
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from emulator.parallel.report import bench_lines

    for line in bench_lines(rows, nccom=not args.model):
        print(line)
    return 0


def bench_main(argv: Sequence[str]) -> int:  # for python -m use
    parser = argparse.ArgumentParser(prog="neuron-emulator bench")
    add_bench_arguments(parser)
    return cmd_bench(parser.parse_args(argv))
