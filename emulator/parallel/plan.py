"""A parallel training configuration and where its ranks sit on the emulated instance.

Layout as Megatron-LM and neuronx-distributed lay it out (docs/parallel.md), answered by the
config's :attr:`ParallelConfig.grid` (``emulator.parallel.ranks``): tensor-parallel ranks are
contiguous, then data-parallel, then pipeline stages (rank =
``pp_rank * dp * tp + dp_rank * tp + tp_rank``), and rank ``r`` of a node runs on its NeuronCore
``r``. So a TP8 group on a trn1.32xlarge holds cores 0-7 (chips 0-3, one row of the torus) and a
DP group of TP8xDP4 holds cores {0, 8, 16, 24} (a column): the collectives of each group use the
links that placement gives them (``emulator/costmodel/topology.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.parallel.ranks import RankGrid
from emulator.workloads.models.recipes import RECOMPUTE, RECOMPUTE_MLP

SCHEDULES = ("1f1b", "gpipe")


class ConfigError(ValueError):
    """A configuration that does not divide the model, the batch or the cores: one line."""


@dataclass(frozen=True)
class ParallelConfig:
    tp: int
    pp: int
    dp: int
    micro_batch: int
    global_batch: int
    seq_len: int
    nodes: int = 1
    zero1: bool = False
    recompute: str = "none"  # "none", "selective" (the attention core) or "full" (every layer)
    recompute_mlp: str = "none"  # "none", "activation" or "module": what of the MLP is recomputed too
    sequence_parallel: bool = False
    schedule: str = "1f1b"
    flash_attention: bool = False
    master_weights: bool = False  # AdamW on FP32 copies of the parameters (and FP32 moments)

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def ranks_per_node(self) -> int:
        return self.world // self.nodes

    @property
    def grid(self) -> RankGrid:
        """Where every rank sits (TP fastest, then DP, then PP; ``emulator.parallel.ranks``)."""
        return RankGrid(tp=self.tp, dp=self.dp, pp=self.pp, ranks_per_node=self.ranks_per_node)

    @property
    def grad_accum(self) -> int:
        """Micro-batches per optimizer step on each data-parallel rank."""
        return self.global_batch // (self.micro_batch * self.dp)

    def describe(self) -> str:
        parts = [f"TP{self.tp}", f"PP{self.pp}", f"DP{self.dp}"]
        extras = [
            name
            for name, on in (
                ("ZeRO-1", self.zero1),
                (f"{self.recompute} recompute", self.recompute != "none"),
                (f"MLP {self.recompute_mlp} recompute", self.recompute_mlp != "none" and self.recompute != "full"),
                ("SP", self.sequence_parallel),
                ("flash attention", self.flash_attention),
                ("FP32 master weights", self.master_weights),
            )
            if on
        ]
        shape = f"micro-batch {self.micro_batch}, global batch {self.global_batch} (accumulation {self.grad_accum})"
        text = "x".join(parts) + f", {shape}, seq {self.seq_len}"
        if self.pp > 1:
            text += f", {self.schedule} schedule"
        return text + (", " + ", ".join(extras) if extras else "")


def make_config(
    *,
    cores_per_node: int,
    tp: int = 1,
    pp: int = 1,
    dp: int | None = None,
    micro_batch: int,
    global_batch: int | None = None,
    seq_len: int,
    nodes: int = 1,
    zero1: bool = False,
    recompute: str = "none",
    recompute_mlp: str = "none",
    sequence_parallel: bool = False,
    schedule: str = "1f1b",
    flash_attention: bool = False,
    master_weights: bool = False,
) -> ParallelConfig:
    """Check a configuration against the instance; ``dp`` defaults to filling every core, the
    global batch to one micro-batch per data-parallel rank (no accumulation)."""
    for flag, value in (("--tp", tp), ("--pp", pp), ("--micro-batch", micro_batch), ("--nodes", nodes)):
        if value < 1:
            raise ConfigError(f"{flag} {value}: expected a positive integer")
    if schedule not in SCHEDULES:
        raise ConfigError(f"--schedule {schedule!r}: expected one of {', '.join(SCHEDULES)}")
    if recompute not in RECOMPUTE:
        raise ConfigError(f"--recompute {recompute!r}: expected one of {', '.join(RECOMPUTE)}")
    if recompute_mlp not in RECOMPUTE_MLP:
        raise ConfigError(f"--recompute-mlp {recompute_mlp!r}: expected one of {', '.join(RECOMPUTE_MLP)}")
    dp = _fit_cores(cores_per_node, nodes, tp, pp, dp)
    if global_batch is None:
        global_batch = micro_batch * dp
    if global_batch < 1 or global_batch % (micro_batch * dp):
        raise ConfigError(
            f"--global-batch {global_batch} is not a multiple of micro-batch {micro_batch} x dp {dp}"
            f" = {micro_batch * dp}"
        )
    if sequence_parallel and tp == 1:
        raise ConfigError("--sequence-parallel needs --tp 2 or more")
    if sequence_parallel and seq_len % tp:
        raise ConfigError(f"--sequence-parallel: seq len {seq_len} is not divisible by --tp {tp}")
    return ParallelConfig(
        tp=tp,
        pp=pp,
        dp=dp,
        micro_batch=micro_batch,
        global_batch=global_batch,
        seq_len=seq_len,
        nodes=nodes,
        zero1=zero1,
        recompute=recompute,
        recompute_mlp=recompute_mlp,
        sequence_parallel=sequence_parallel,
        schedule=schedule,
        flash_attention=flash_attention,
        master_weights=master_weights,
    )


def _fit_cores(cores_per_node: int, nodes: int, tp: int, pp: int, dp: int | None) -> int:
    """The data-parallel size (by default every core filled), checked against the nodes' cores."""
    cores = cores_per_node * nodes
    if dp is None:
        if cores % (tp * pp):
            raise ConfigError(f"--tp {tp} x --pp {pp} = {tp * pp} does not divide the {cores} NeuronCores")
        dp = cores // (tp * pp)
    if dp < 1:
        raise ConfigError(f"--dp {dp}: expected a positive integer")
    world = tp * pp * dp
    if world > cores:
        raise ConfigError(f"--tp {tp} x --pp {pp} x --dp {dp} = {world} ranks, but there are {cores} NeuronCores")
    if world % nodes:
        raise ConfigError(f"{world} ranks do not split evenly over {nodes} nodes")
    if nodes > 1 and world // nodes != cores_per_node:
        raise ConfigError(f"a multi-node job fills every node: {world} ranks over {nodes} nodes of {cores_per_node}")
    if tp > cores_per_node:
        raise ConfigError(f"--tp {tp}: a tensor-parallel group stays inside one node ({cores_per_node} NeuronCores)")
    return dp
