"""The layout flags of model-scale jobs (``run MODEL`` and ``bench``): tensor/pipeline/data
parallel degrees, batches, memory settings, and where a multi-node job's nodes are
(docs/parallel.md, docs/multinode.md). Bad values are :class:`ArgumentError` (one line, exit 1)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from emulator.cli.args import ArgumentError, choice, positive_int

if TYPE_CHECKING:
    from emulator.parallel.nodes import NodeTargets
    from emulator.parallel.runner import JobRequest


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
    g.add_argument(
        "--recompute",
        nargs="?",
        const="full",
        metavar="WHAT",
        help="recompute activations in the backward pass: full (every layer; the default of a bare --recompute) "
        "or selective (the attention core); default: as the model's published recipe",
    )
    g.add_argument("--no-recompute", dest="recompute", action="store_const", const="none", help="keep every activation")
    g.add_argument(
        "--recompute-mlp",
        metavar="WHAT",
        help="what of the MLP is recomputed too (unless --recompute full): none, activation (its activation "
        "function) or module (all of it); default: as the model's published recipe",
    )
    g.add_argument(
        "--sequence-parallel",
        action=argparse.BooleanOptionalAction,
        help="Megatron sequence parallelism (needs --tp; default: as the model's published recipe)",
    )
    g.add_argument(
        "--flash-attention",
        action=argparse.BooleanOptionalAction,
        help="the attention core as one fused kernel each way, no sequence x sequence scores in HBM "
        "(default: as the model's published recipe)",
    )
    g.add_argument(
        "--master-weights",
        action=argparse.BooleanOptionalAction,
        help="mixed precision: AdamW on FP32 master weights with FP32 moments, instead of BF16 with stochastic "
        "rounding (default: as the model's published recipe)",
    )
    g.add_argument("--schedule", metavar="S", help="pipeline schedule: 1f1b (default) or gpipe")
    g.add_argument(
        "--sdk",
        metavar="RELEASE",
        help="the Neuron SDK release to model: its compiler efficiency and the mechanisms it has "
        "(default: the newest modelled, or NEURON_EMULATOR_SDK; docs/cost-model.md §SDK eras)",
    )


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


def node_targets(args: argparse.Namespace) -> NodeTargets:
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
            raise ArgumentError("--master-addr and --master-port go with --node-rank (one launcher per host)")
        if nodes > 1:
            return cluster_targets(nodes)
    try:
        address = str(resolve_address(None))
    except AddressError as exc:
        raise ArgumentError(str(exc)) from None
    if rank_text is None:
        return single_node(address)
    try:
        node_rank = int(rank_text)
    except ValueError:
        raise ArgumentError(f"--node-rank {rank_text!r}: expected an integer") from None
    if port_text is None:
        raise ArgumentError("--node-rank needs --master-port (and --master-addr unless node 0 is this host)")
    port = _int("--master-port", port_text, None) or 0
    return host_targets(nodes, node_rank, addr or "127.0.0.1", port, address)


def _int(flag: str, text: str | None, default: int | None) -> int | None:
    value = positive_int(flag, text)
    return default if value is None else value


def request_from_args(args: argparse.Namespace, model: str, *, published_scale: bool = False) -> JobRequest:
    """The job asked for; ``published_scale``: what is not asked is the published run's, nodes and
    global batch included (``bench``), else one node (``run``)."""
    from emulator.parallel.runner import JobRequest
    from emulator.workloads import DTYPES
    from emulator.workloads.models.recipes import RECOMPUTE, RECOMPUTE_MLP

    micro = _int("--micro-batch", getattr(args, "micro_batch", None), None)
    legacy = _int("--batch-size", getattr(args, "batch_size", None), None)
    if micro is not None and legacy is not None and micro != legacy:
        raise ArgumentError("--micro-batch and --batch-size disagree (they are the same setting)")
    dtype = choice("--dtype", getattr(args, "dtype", None) or "bf16", DTYPES) or "bf16"
    recompute = choice("--recompute", args.recompute, RECOMPUTE) if args.recompute is not None else None
    mlp = getattr(args, "recompute_mlp", None)
    recompute_mlp = choice("--recompute-mlp", mlp, RECOMPUTE_MLP) if mlp is not None else None
    return JobRequest(
        model=model,
        tp=_int("--tp", args.tp, None),
        pp=_int("--pp", args.pp, None),
        dp=_int("--dp", args.dp, None),
        micro_batch=micro or legacy,
        global_batch=_int("--global-batch", args.global_batch, None),
        seq_len=_int("--seq-len", getattr(args, "seq_len", None), None),
        nodes=_int("--nodes", getattr(args, "nodes", None), None),
        zero1=args.zero1,
        recompute=recompute,
        recompute_mlp=recompute_mlp,
        sequence_parallel=args.sequence_parallel,
        flash_attention=args.flash_attention,
        master_weights=args.master_weights,
        schedule=(args.schedule or "1f1b").lower(),
        dtype=dtype,
        auto_cast=getattr(args, "auto_cast", None),
        sdk=getattr(args, "sdk", None),
        published_scale=published_scale,
    )


def forwarded_flags(args: argparse.Namespace) -> list[str]:
    """The flags a rank's command line shows (the same for every rank, as under torchrun)."""
    out: list[str] = []
    for flag in (
        "tp",
        "pp",
        "dp",
        "micro_batch",
        "global_batch",
        "seq_len",
        "steps",
        "dtype",
        "schedule",
        "nodes",
        "sdk",
        "recompute_mlp",
    ):
        value = getattr(args, flag, None)
        if value is not None:
            out += ["--" + flag.replace("_", "-"), str(value)]
    recompute = getattr(args, "recompute", None)
    if recompute is not None:
        out += ["--no-recompute"] if recompute == "none" else ["--recompute", recompute]
    for flag in ("zero1", "sequence_parallel", "flash_attention", "master_weights"):  # on, off, or as the recipe
        value = getattr(args, flag, None)
        if value is not None:
            out.append(("--" if value else "--no-") + flag.replace("_", "-"))
    return out
