"""neuronx-distributed's tensor-parallel layers, loss, mappings, gradient helpers and model move,
on the emulator (docs/run-your-script.md).

The layers are :mod:`emulator.parallel.layers` — the ones the model-scale workloads use, with
their forward and backward, their parameter tags (``tensor_model_parallel``, ``partition_dim``,
``partition_stride``, ``num_partitions``, ``sequence_parallel_enabled``;
:mod:`emulator.parallel.partition`) and their mappings (Megatron semantics: identity /
all-reduce, all-gather / reduce-scatter under sequence parallelism) — behind
neuronx-distributed's constructor arguments, here run with real collectives over the
tensor-parallel group (:mod:`emulator.compat.nxd_state`). What this module adds is the
initialisation: as neuronx-distributed does on the CPU, the full fp32 weight is initialised with
the same RNG on every rank and each rank keeps its slice (:class:`CpuMasterInit`), so a TP model
starts from the same values as the unsharded one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from emulator.compat import collectives, nxd_state, world
from emulator.compat.gaps import NotEmulatedError
from emulator.parallel import layers
from emulator.parallel import mappings as tp
from emulator.parallel.partition import is_tensor_parallel


def param_is_not_tensor_parallel_duplicate(param: torch.Tensor) -> bool:
    return is_tensor_parallel(param) or tp.tp_rank() == 0


def requires_init_pg_override() -> bool:
    """NxD's: only torch 2.0 needs ``init_process_group('xla', init_method='pjrt://')``."""
    return torch.__version__.startswith("2.0")


def get_local_world_size() -> int:
    return world.local_world_size()


def _refuse(layer: str, **options: Any) -> None:
    """Options of the real layers this emulation does not implement: refuse non-default values."""
    defaults = {
        "stride": 1,
        "pad": False,
        "sequence_dimension": 0,
        "tensor_model_parallel_group": None,
        "rank_ordering": None,
    }
    for name, value in options.items():
        if value is not None and value != defaults.get(name):
            raise NotEmulatedError(f"neuronx_distributed {layer}({name}={value!r})")


class CpuMasterInit:
    """neuronx-distributed's CPU initialisation: the full fp32 weight is initialised with
    ``init_method`` (the same RNG on every rank) and each rank keeps its slice in ``dtype`` on
    ``device``; a bias is uniform in ``+-1/sqrt(fan_in)``."""

    def __init__(
        self,
        init_method: Callable[[torch.Tensor], Any],
        dtype: torch.dtype,
        device: Any,
        blocks: tuple[int, ...] | None = None,
    ) -> None:
        # blocks: the sizes, along the split dimension, of the weights a fused weight stacks (Q, K,
        # V); each is split over the ranks on its own. None: one weight.
        self.init_method, self.dtype, self.device, self.blocks = init_method, dtype, device, blocks

    def _parameter(self, t: torch.Tensor) -> nn.Parameter:
        return nn.Parameter(t.to(self.device) if self.device is not None else t)

    def weight(self, full_shape: tuple[int, int], partition_dim: int) -> nn.Parameter:
        master = torch.empty(full_shape, dtype=torch.float32)
        self.init_method(master)
        # a fused weight: each block split over the ranks, a rank keeping its slice of every block
        blocks = master.split(list(self.blocks), dim=partition_dim) if self.blocks else (master,)
        shard = torch.cat([b.chunk(tp.tp_size(), dim=partition_dim)[tp.tp_rank()] for b in blocks], dim=partition_dim)
        return self._parameter(shard.to(self.dtype).contiguous())

    def bias(self, size: int, fan_in: int) -> nn.Parameter:
        bias = torch.empty(size, dtype=self.dtype)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        nn.init.uniform_(bias, -bound, bound)
        return self._parameter(bias)


class _CpuReinit:
    """``init_weight_cpu()``: the weight initialised again as at construction (NxD's examples call
    it from a ``param_init_fn`` after building the model on the meta device)."""

    weight: nn.Parameter
    _cpu_init: CpuMasterInit
    _master: tuple[tuple[int, int], int]  # the full weight's shape, the dimension split over TP

    def _remember(self, init: CpuMasterInit, full_shape: tuple[int, int], partition_dim: int) -> None:
        self._cpu_init, self._master = init, (full_shape, partition_dim)

    def init_weight_cpu(self) -> None:
        fresh = self._cpu_init.weight(*self._master)
        with torch.no_grad():
            self.weight.copy_(fresh.to(self.weight.device, self.weight.dtype))


def _default_linear_init(weight: torch.Tensor) -> None:
    nn.init.kaiming_uniform_(weight, a=math.sqrt(5))


def _require_model_parallel(layer: str) -> None:
    if not nxd_state.model_parallel_is_initialized():
        raise RuntimeError(f"{layer}: call parallel_state.initialize_model_parallel() first")


# -- layers: neuronx-distributed's arguments over emulator.parallel.layers ------------------------
class ColumnParallelLinear(layers.ColumnParallelLinear, _CpuReinit):
    """``Y = X A^T + b``, ``A`` split by output features: weight ``[out/tp, in]``."""

    def __init__(
        self,
        input_size: int,
        output_size: int,
        bias: bool = True,
        gather_output: bool = True,
        dtype: torch.dtype = torch.float32,
        device: Any = None,
        stride: int = 1,
        init_method: Callable[[torch.Tensor], Any] | None = None,
        sequence_parallel_enabled: bool = False,
        sequence_dimension: int | None = None,
        keep_master_weight: bool = False,
        skip_bias_add: bool = False,
        pad: bool = False,
        **options: Any,
    ) -> None:
        _require_model_parallel("ColumnParallelLinear")
        _refuse("ColumnParallelLinear", pad=pad, sequence_dimension=sequence_dimension, **options)
        if stride < 1 or output_size % (stride * tp.tp_size()):
            raise ValueError(f"ColumnParallelLinear: output_size {output_size} is not split by stride {stride} x TP")
        init = CpuMasterInit(init_method or _default_linear_init, dtype, device, self._blocks(output_size, stride))
        super().__init__(
            input_size,
            output_size,
            bias,
            gather_output,
            sequence_parallel_enabled=sequence_parallel_enabled,
            skip_bias_add=skip_bias_add,
            init=init,
        )
        self._remember(init, (output_size, input_size), 0)

    def _blocks(self, output_size: int, stride: int) -> tuple[int, ...] | None:
        """The fused weights' sizes: ``stride`` equal ones (NxD's strided split)."""
        return (output_size // stride,) * stride if stride > 1 else None


class RowParallelLinear(layers.RowParallelLinear, _CpuReinit):
    """``Y = X A^T + b``, ``A`` split by input features: weight ``[out, in/tp]``, full bias added
    after the all-reduce (reduce-scatter along the sequence under sequence parallelism)."""

    def __init__(
        self,
        input_size: int,
        output_size: int,
        bias: bool = True,
        input_is_parallel: bool = False,
        dtype: torch.dtype = torch.float32,
        device: Any = None,
        stride: int = 1,
        init_method: Callable[[torch.Tensor], Any] | None = None,
        sequence_parallel_enabled: bool = False,
        sequence_dimension: int | None = None,
        keep_master_weight: bool = False,
        skip_bias_add: bool = False,
        pad: bool = False,
        reduce_output: bool = True,
        **options: Any,
    ) -> None:
        _require_model_parallel("RowParallelLinear")
        _refuse("RowParallelLinear", stride=stride, pad=pad, sequence_dimension=sequence_dimension, **options)
        init = CpuMasterInit(init_method or _default_linear_init, dtype, device)
        super().__init__(
            input_size,
            output_size,
            bias,
            input_is_parallel,
            sequence_parallel_enabled=sequence_parallel_enabled,
            skip_bias_add=skip_bias_add,
            reduce_output=reduce_output,
            init=init,
        )
        self._remember(init, (output_size, input_size), 1)


class ParallelEmbedding(layers.VocabParallelEmbedding, _CpuReinit):
    """Embedding split by vocabulary rows: weight ``[V/tp, D]``; partial lookups all-reduced
    (reduce-scattered along the sequence under sequence parallelism)."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        init_method: Callable[[torch.Tensor], Any] = nn.init.normal_,
        device: Any = None,
        dtype: torch.dtype = torch.float32,
        shard_across_embedding: bool = False,
        pad: bool = False,
        sequence_parallel_enabled: bool = False,
        **options: Any,
    ) -> None:
        _require_model_parallel("ParallelEmbedding")
        _refuse("ParallelEmbedding", pad=pad, **options)
        init = CpuMasterInit(init_method, dtype, device)
        for name, value in (
            ("max_norm", max_norm),
            ("scale_grad_by_freq", scale_grad_by_freq or None),
            ("sparse", sparse or None),
            ("shard_across_embedding", shard_across_embedding or None),
        ):
            if value is not None:
                raise NotEmulatedError(f"neuronx_distributed ParallelEmbedding({name}={value!r})")
        super().__init__(
            num_embeddings,
            embedding_dim,
            padding_idx,
            sequence_parallel_enabled=False,
            init=init,
        )
        self._remember(init, (num_embeddings, embedding_dim), 0)
        self.nxd_sequence_parallel = sequence_parallel_enabled

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """NxD's: ids ``[b, s]``; under sequence parallelism the lookup is transposed to ``[s, b, h]``
        and reduce-scattered along the sequence (also at TP 1, where that is the transpose alone)."""
        if not self.nxd_sequence_parallel:
            return super().forward(ids)
        partial = self.partial_lookup(ids).transpose(0, 1).contiguous()
        return tp.reduce_scatter_to_sp_region(partial) if tp.tp_size() > 1 else partial


def parallel_cross_entropy(
    vocab_parallel_logits: torch.Tensor, target: torch.Tensor, label_smoothing: float = 0.0
) -> torch.Tensor:
    """Per-token cross entropy (no reduction) from this rank's vocabulary shard of the logits."""
    if label_smoothing:
        raise NotEmulatedError("neuronx_distributed parallel_cross_entropy(label_smoothing=...)")
    return layers.vocab_parallel_cross_entropy(vocab_parallel_logits, target)


# -- mappings (neuronx_distributed.parallel_layers.mappings) -------------------------------------
def _tp_only(process_group: Any, name: str) -> None:
    if process_group is not None and process_group is not nxd_state.get_tensor_model_parallel_group():
        raise NotEmulatedError(f"neuronx_distributed mappings.{name}(process_group=...) other than the TP group")


def copy_to_tensor_model_parallel_region(x: torch.Tensor, process_group: Any = None) -> torch.Tensor:
    _tp_only(process_group, "copy_to_tensor_model_parallel_region")
    return tp.copy_to_tp_region(x)


def reduce_from_tensor_model_parallel_region(x: torch.Tensor, process_group: Any = None) -> torch.Tensor:
    _tp_only(process_group, "reduce_from_tensor_model_parallel_region")
    return tp.reduce_from_tp_region(x)


def scatter_to_tensor_model_parallel_region(x: torch.Tensor, process_group: Any = None) -> torch.Tensor:
    _tp_only(process_group, "scatter_to_tensor_model_parallel_region")
    return tp.scatter_to_tp_region(x)


def gather_from_tensor_model_parallel_region(x: torch.Tensor, process_group: Any = None) -> torch.Tensor:
    _tp_only(process_group, "gather_from_tensor_model_parallel_region")
    return tp.gather_from_tp_region(x)


def _sequence_dim(sequence_dimension: int, name: str) -> None:
    if sequence_dimension != 0:
        raise NotEmulatedError(f"neuronx_distributed mappings.{name}(sequence_dimension={sequence_dimension})")


def gather_from_sequence_parallel_region(
    x: torch.Tensor,
    sequence_dimension: int = 0,
    to_model_parallel: bool = True,
    process_group: Any = None,
    **options: Any,
) -> torch.Tensor:
    _sequence_dim(sequence_dimension, "gather_from_sequence_parallel_region")
    _tp_only(process_group, "gather_from_sequence_parallel_region")
    return tp.gather_from_sp_region(x, reduce_grad=to_model_parallel)


def reduce_scatter_to_sequence_parallel_region(
    x: torch.Tensor, sequence_dimension: int = 0, process_group: Any = None, dtype: Any = None
) -> torch.Tensor:
    _sequence_dim(sequence_dimension, "reduce_scatter_to_sequence_parallel_region")
    _tp_only(process_group, "reduce_scatter_to_sequence_parallel_region")
    return tp.reduce_scatter_to_sp_region(x)


def scatter_to_sequence_parallel_region(
    x: torch.Tensor, sequence_dimension: int = 0, process_group: Any = None
) -> torch.Tensor:
    _sequence_dim(sequence_dimension, "scatter_to_sequence_parallel_region")
    _tp_only(process_group, "scatter_to_sequence_parallel_region")
    return tp.scatter_to_sp_region(x)


# -- gradients (neuronx_distributed.parallel_layers.grads) ---------------------------------------
def bucket_allreduce_gradients(grads_list: list[torch.Tensor], reduce_over_ep_group: bool = False) -> None:
    """Average the gradients over the data-parallel group (each divided by its size, then summed)."""
    if reduce_over_ep_group:
        raise NotEmulatedError("bucket_allreduce_gradients(reduce_over_ep_group=True)", "expert parallelism")
    dp = nxd_state.get_data_parallel_size()
    if dp > 1 and grads_list:
        collectives.group(nxd_state.group_ranks("dp")).all_reduce_(grads_list, "sum", 1.0 / dp)


def allreduce_sequence_parallel_gradients(optimizer: torch.optim.Optimizer) -> None:
    """Sum over the tensor-parallel group the gradients of the optimizer's parameters tagged
    ``sequence_parallel_enabled`` (norms, row-parallel biases: each rank saw a slice of the
    sequence), as one coalesced all-reduce — the model-scale layers' own gradient helper."""
    layers.allreduce_sequence_parallel_grads(p for group in optimizer.param_groups for p in group["params"])


def norm_share(param: torch.Tensor) -> float:
    """What one rank's squared gradient of ``param`` counts in the model's global norm: all of a
    tensor-parallel shard, 1/TP of a parameter every TP rank holds a copy of."""
    return 1.0 if is_tensor_parallel(param) else 1.0 / tp.tp_size()


def get_grad_norm(
    parameters: Iterable[torch.Tensor] | torch.Tensor, norm_type: float = 2, **options: Any
) -> torch.Tensor:
    """The gradient norm of the whole model: tensor-parallel shards count once each, replicated
    parameters once over the group (their share divided by the TP size), summed over TP."""
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    grads = [(p.grad, norm_share(p)) for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    size = tp.tp_size()
    if math.isinf(norm_type):
        local = torch.stack([g.detach().abs().max().float() for g, _ in grads]).max()
        return _tp_all_reduce(local, "max") if size > 1 else local
    total = torch.zeros((), dtype=torch.float32, device=grads[0][0].device)
    for g, share in grads:
        total = total + g.detach().float().norm(norm_type) ** norm_type * share
    if size > 1:
        total = _tp_all_reduce(total, "sum")
    return total ** (1.0 / norm_type)


def _tp_all_reduce(scalar: torch.Tensor, op: str) -> torch.Tensor:
    return collectives.group(nxd_state.group_ranks("tp")).all_reduce(scalar.reshape(1), op).reshape(())


def clip_grad_norm(
    parameters: Iterable[torch.Tensor] | torch.Tensor, max_norm: float, norm_type: float = 2, **options: Any
) -> torch.Tensor:
    """Scale every gradient by ``min(1, max_norm / (norm + 1e-6))``; return the norm."""
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    norm = get_grad_norm(params, norm_type)
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for p in params:
        if p.grad is not None:
            p.grad.detach().mul_(coef.to(p.grad.dtype))
    return norm


# -- the model on the device ---------------------------------------------------------------------
def move_model_to_device(model: nn.Module, device: Any) -> None:
    """``model.to(device)``, keeping the Python attributes of the parameters — the parallel tags
    (``tensor_model_parallel``, ``partition_dim``, ``sequence_parallel_enabled`` ...) and any
    other a script set: ``.to`` makes new Parameter objects for another device type, without them."""
    saved = {n: dict(vars(p)) for n, p in model.named_parameters()}
    model.to(device)
    for n, p in model.named_parameters():
        for a, v in saved.get(n, {}).items():
            if not hasattr(p, a):
                setattr(p, a, v)
    tie = getattr(model, "tie_weights", None)
    if callable(tie):
        tie()


def model_parallel_xla_manual_seed(seed: int) -> None:
    """Seed the RNG every rank uses (layers initialise on the CPU, identically on every rank)."""
    torch.manual_seed(seed)
