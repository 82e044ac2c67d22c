"""``neuronx_distributed.parallel_layers.parallel_state`` on the emulator.

``initialize_model_parallel(tensor_model_parallel_size, pipeline_model_parallel_size)`` lays the
job's ranks out as neuronx-distributed does by default: the ranks ``0 .. world-1`` in a
``[PP, DP, TP]`` grid, row-major, so a tensor-parallel group is ``TP`` consecutive ranks, a
data-parallel group takes every ``TP``-th rank of a pipeline stage, and a pipeline group every
``DP*TP``-th rank (docs/run-your-script.md). (On a trn1.32xlarge with TP=4, neuronx-distributed
strides the TP groups across the node instead; that special case is not reproduced.)

The getters answer from that layout. The groups' collectives are real and costed: the tensor-
parallel layers reach them through :class:`RealCommunicator`, which the initialisation makes
the active communicator of ``emulator.parallel.comm`` (the same layers the model-scale tracer
uses, on values instead of shapes). ``torch.distributed`` groups are made too (``new_group``,
every rank for every group, in order), for scripts that pass them to ``torch.distributed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from emulator.compat import collectives, world
from emulator.compat.gaps import NotEmulatedError
from emulator.parallel import comm
from emulator.parallel.comm import ParallelState


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    dp: int
    tp_groups: list[list[int]]
    dp_groups: list[list[int]]
    pp_groups: list[list[int]]

    def group_of(self, kind: str, rank: int) -> list[int]:
        groups = {"tp": self.tp_groups, "dp": self.dp_groups, "pp": self.pp_groups}[kind]
        return next(g for g in groups if rank in g)


def layout(world_size: int, tp: int, pp: int) -> Layout:
    """The ``[PP, DP, TP]`` grid of ``world_size`` ranks (ValueError if the sizes do not divide it)."""
    if tp < 1 or pp < 1:
        raise ValueError(f"tensor and pipeline parallel sizes must be at least 1 (got {tp} and {pp})")
    if world_size % (tp * pp):
        raise RuntimeError(
            f"world size {world_size} is not divisible by tensor parallel size {tp} x pipeline parallel size {pp}"
        )
    dp = world_size // (tp * pp)

    def rank(p: int, d: int, t: int) -> int:
        return (p * dp + d) * tp + t

    return Layout(
        tp=tp,
        pp=pp,
        dp=dp,
        tp_groups=[[rank(p, d, t) for t in range(tp)] for p in range(pp) for d in range(dp)],
        dp_groups=[[rank(p, d, t) for d in range(dp)] for p in range(pp) for t in range(tp)],
        pp_groups=[[rank(p, d, t) for p in range(pp)] for d in range(dp) for t in range(tp)],
    )


class RealCommunicator:
    """The collectives of the tensor-parallel layers, done between the processes on the values."""

    def __init__(self, state: ParallelState, groups: dict[str, list[int]]) -> None:
        self.state = state
        self._groups = groups

    def _group(self, name: str) -> collectives.Group:
        return collectives.group(self._groups[name])

    def all_reduce(self, t: torch.Tensor, group: str, op: str) -> torch.Tensor:
        return self._group(group).all_reduce(t, op)

    def all_gather(self, t: torch.Tensor, dim: int, group: str) -> torch.Tensor:
        return self._group(group).all_gather(t, dim)

    def reduce_scatter(self, t: torch.Tensor, dim: int, group: str) -> torch.Tensor:
        return self._group(group).reduce_scatter(t, dim)

    def send(self, t: torch.Tensor, group: str) -> None:
        raise NotEmulatedError("pipeline-parallel sends of neuronx_distributed", "the NxD pipeline engine")


_layout: Layout | None = None
_torch_groups: dict[str, Any] = {}


def initialize_model_parallel(
    tensor_model_parallel_size: int = 1,
    pipeline_model_parallel_size: int = 1,
    context_parallel_size: int = 1,
    expert_model_parallel_size: int = 1,
    skip_collective_init: bool = False,
    lnc_size: int = 1,
    mesh_only: bool = False,
) -> None:
    global _layout
    if context_parallel_size != 1:
        raise NotEmulatedError("context parallelism (context_parallel_size > 1)")
    if expert_model_parallel_size != 1:
        raise NotEmulatedError("expert parallelism (expert_model_parallel_size > 1)")
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("initialize_model_parallel: call torch.distributed.init_process_group('xla') first")
    size = dist.get_world_size()
    grid = layout(size, min(tensor_model_parallel_size, size), min(pipeline_model_parallel_size, size))
    me = dist.get_rank()
    mine = {kind: grid.group_of(kind, me) for kind in ("tp", "dp", "pp")}
    _torch_groups.clear()
    if not mesh_only:
        for kind, groups in (("tp", grid.tp_groups), ("dp", grid.dp_groups), ("pp", grid.pp_groups)):
            for ranks in groups:  # every rank makes every group, in the same order (torch.distributed's rule)
                pg = dist.new_group(ranks)
                if me in ranks:
                    _torch_groups[kind] = pg
    state = ParallelState(
        tp=grid.tp,
        pp=grid.pp,
        dp=grid.dp,
        tp_rank=mine["tp"].index(me),
        pp_rank=mine["pp"].index(me),
        dp_rank=mine["dp"].index(me),
    )
    comm.set_communicator(RealCommunicator(state, mine))
    _layout = grid


def model_parallel_is_initialized() -> bool:
    return _layout is not None


def destroy_model_parallel() -> None:
    global _layout
    _layout = None
    _torch_groups.clear()
    comm.set_communicator(None)


def _grid() -> Layout:
    if _layout is None:
        raise RuntimeError("model parallel is not initialized: call initialize_model_parallel first")
    return _layout


def _state() -> ParallelState:
    _grid()
    return comm.state()


def _torch_group(kind: str, as_list: bool) -> Any:
    grid = _grid()
    if as_list:
        return {"tp": grid.tp_groups, "dp": grid.dp_groups, "pp": grid.pp_groups}[kind]
    return _torch_groups.get(kind)


def get_tensor_model_parallel_size() -> int:
    return _state().tp


def get_tensor_model_parallel_rank() -> int:
    return _state().tp_rank


def get_tensor_model_parallel_group(as_list: bool = False) -> Any:
    return _torch_group("tp", as_list)


def get_tensor_model_parallel_replica_groups() -> list[list[int]]:
    return _grid().tp_groups


def get_tensor_model_parallel_src_rank() -> int:
    return _grid().group_of("tp", world.global_rank())[0]


def get_data_parallel_size() -> int:
    return _state().dp


def get_data_parallel_rank() -> int:
    return _state().dp_rank


def get_data_parallel_group(as_list: bool = False) -> Any:
    return _torch_group("dp", as_list)


def get_data_parallel_replica_groups() -> list[list[int]]:
    return _grid().dp_groups


def get_data_parallel_src_rank() -> int:
    return _grid().group_of("dp", world.global_rank())[0]


def get_pipeline_model_parallel_size() -> int:
    return _state().pp


def get_pipeline_model_parallel_rank() -> int:
    return _state().pp_rank


def get_pipeline_model_parallel_group(as_list: bool = False) -> Any:
    return _torch_group("pp", as_list)


def get_pipeline_model_parallel_replica_groups() -> list[list[int]]:
    return _grid().pp_groups


def get_world_group(as_list: bool = False) -> Any:
    return [list(range(world.world_size()))] if as_list else dist.group.WORLD


def is_global_rank_zero() -> bool:
    return world.global_rank() == 0


def rmsg(msg: str) -> str:
    """``msg`` prefixed with this rank's place in the job."""
    s = _state()
    return f"[rank_{world.global_rank()}_pp{s.pp_rank}_tp{s.tp_rank}_dp{s.dp_rank}] {msg}"
