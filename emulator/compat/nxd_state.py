"""``neuronx_distributed.parallel_layers.parallel_state`` on the emulator.

``initialize_model_parallel(tensor_model_parallel_size, pipeline_model_parallel_size)`` lays the
job's ranks out as neuronx-distributed does by default: the ranks ``0 .. world-1`` in a
``[PP, DP, TP]`` grid, row-major — the :class:`~emulator.parallel.ranks.RankGrid` of order
``tp-dp-pp`` the model-scale jobs use too — so a tensor-parallel group is ``TP`` consecutive
ranks, a data-parallel group takes every ``TP``-th rank of a pipeline stage, and a pipeline group
every ``DP*TP``-th rank (docs/run-your-script.md). (On a trn1.32xlarge with TP=4, neuronx-distributed
strides the TP groups across the node instead; that special case is not reproduced.)

The getters answer from that grid, through this rank's
:class:`~emulator.parallel.ranks.ParallelState`. The groups' collectives are real and costed: the tensor-
parallel layers reach them through :class:`RealCommunicator`, which the initialisation makes
the active communicator of ``emulator.parallel.comm`` (the same layers the model-scale tracer
uses, on values instead of shapes). ``torch.distributed`` groups are made too (``new_group``,
every rank for every group, in order), for scripts that pass them to ``torch.distributed``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from emulator.compat import collectives, world
from emulator.compat.gaps import NotEmulatedError
from emulator.parallel import comm
from emulator.parallel.ranks import AXES, ParallelState, RankGrid


class RealCommunicator:
    """The collectives of the tensor-parallel layers, done between the processes on the values
    over this rank's groups of the grid."""

    def __init__(self, state: ParallelState) -> None:
        self.state = state

    def _group(self, name: str) -> collectives.Group:
        # the stage's other groups of this kind run the same collective at the same time: costed
        # on the shared links as a replayed plan's is (docs/collectives.md)
        siblings = self.state.grid.concurrent_groups(name, self.state.rank)
        return collectives.group(self.state.group(name), siblings=siblings)

    def all_reduce(self, t: torch.Tensor, group: str, op: str) -> torch.Tensor:
        return self._group(group).all_reduce(t, op)

    def all_gather(self, t: torch.Tensor, dim: int, group: str) -> torch.Tensor:
        return self._group(group).all_gather(t, dim)

    def reduce_scatter(self, t: torch.Tensor, dim: int, group: str) -> torch.Tensor:
        return self._group(group).reduce_scatter(t, dim)

    def send(self, t: torch.Tensor, group: str) -> None:
        raise NotEmulatedError("pipeline-parallel sends of neuronx_distributed", "the NxD pipeline engine")


_grid: RankGrid | None = None
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
    global _grid
    if context_parallel_size != 1:
        raise NotEmulatedError("context parallelism (context_parallel_size > 1)")
    if expert_model_parallel_size != 1:
        raise NotEmulatedError("expert parallelism (expert_model_parallel_size > 1)")
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("initialize_model_parallel: call torch.distributed.init_process_group('xla') first")
    size = dist.get_world_size()
    tp, pp = min(tensor_model_parallel_size, size), min(pipeline_model_parallel_size, size)
    try:
        grid = RankGrid.for_world(size, tp=tp, pp=pp)
    except ValueError as exc:
        raise RuntimeError(str(exc)) from None
    me = dist.get_rank()
    _torch_groups.clear()
    if not mesh_only:
        for kind in AXES:  # every rank makes every group, in the same order (torch.distributed's rule)
            for ranks in grid.groups(kind):
                pg = dist.new_group(ranks)
                if me in ranks:
                    _torch_groups[kind] = pg
    comm.set_communicator(RealCommunicator(grid.state(me)))
    _grid = grid


def model_parallel_is_initialized() -> bool:
    return _grid is not None


def destroy_model_parallel() -> None:
    global _grid
    _grid = None
    _torch_groups.clear()
    comm.set_communicator(None)


def _state() -> ParallelState:
    """This rank's view of the grid (a RuntimeError before initialize_model_parallel)."""
    if _grid is None:
        raise RuntimeError("model parallel is not initialized: call initialize_model_parallel first")
    return comm.state()


def group_ranks(kind: str) -> list[int]:
    """The global ranks of this rank's ``tp``, ``dp`` or ``pp`` group."""
    return _state().group(kind)


def _torch_group(kind: str, as_list: bool) -> Any:
    return _state().grid.groups(kind) if as_list else _torch_groups.get(kind)


def get_tensor_model_parallel_size() -> int:
    return _state().tp


def get_tensor_model_parallel_rank() -> int:
    return _state().tp_rank


def get_tensor_model_parallel_group(as_list: bool = False) -> Any:
    return _torch_group("tp", as_list)


def get_tensor_model_parallel_replica_groups() -> list[list[int]]:
    return _state().grid.groups("tp")


def get_tensor_model_parallel_src_rank() -> int:
    return group_ranks("tp")[0]


def get_data_parallel_size() -> int:
    return _state().dp


def get_data_parallel_rank() -> int:
    return _state().dp_rank


def get_data_parallel_group(as_list: bool = False) -> Any:
    return _torch_group("dp", as_list)


def get_data_parallel_replica_groups() -> list[list[int]]:
    return _state().grid.groups("dp")


def get_data_parallel_src_rank() -> int:
    return group_ranks("dp")[0]


def get_pipeline_model_parallel_size() -> int:
    return _state().pp


def get_pipeline_model_parallel_rank() -> int:
    return _state().pp_rank


def get_pipeline_model_parallel_group(as_list: bool = False) -> Any:
    return _torch_group("pp", as_list)


def get_pipeline_model_parallel_replica_groups() -> list[list[int]]:
    return _state().grid.groups("pp")


def get_world_group(as_list: bool = False) -> Any:
    return [list(range(world.world_size()))] if as_list else dist.group.WORLD


def is_global_rank_zero() -> bool:
    return world.global_rank() == 0


def rmsg(msg: str) -> str:
    """``msg`` prefixed with this rank's place in the job."""
    s = _state()
    return f"[rank_{world.global_rank()}_pp{s.pp_rank}_tp{s.tp_rank}_dp{s.dp_rank}] {msg}"


# -- context parallelism: one context-parallel rank (a size above 1 is refused at initialisation)
def get_context_model_parallel_size() -> int:
    return 1


def get_context_model_parallel_rank() -> int:
    return 0


def get_context_model_parallel_src_tgt_pairs() -> list:
    raise NotEmulatedError("neuronx_distributed get_context_model_parallel_src_tgt_pairs", "context parallelism")
