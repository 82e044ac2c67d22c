"""neuronx-distributed's tensor-parallel layers, loss, mappings, gradient helpers and model move,
on the emulator (docs/run-your-script.md).

The layers keep neuronx-distributed's constructor arguments and parameter shapes and tags
(``tensor_model_parallel``, ``partition_dim``, ``partition_stride``, ``num_partitions``) and run
the mappings of :mod:`emulator.parallel.layers` (Megatron semantics: identity / all-reduce,
all-gather / reduce-scatter under sequence parallelism) with real collectives over the
tensor-parallel group (:mod:`emulator.compat.nxd_state`). Weights are initialised as
neuronx-distributed does on the CPU: the full fp32 weight is initialised with the same RNG on
every rank and each rank keeps its slice, so a TP model starts from the same values as the
unsharded one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from emulator.compat import collectives, nxd_state, world
from emulator.compat.gaps import NotEmulatedError
from emulator.parallel import layers as tp

_TP_ATTRIBUTES = ("tensor_model_parallel", "partition_dim", "partition_stride", "num_partitions")


# -- parameter tags ------------------------------------------------------------------------------
def set_tensor_model_parallel_attributes(
    tensor: torch.Tensor, is_parallel: bool, dim: int, stride: int, num_partitions: int = -1, rank_ordering: Any = None
) -> None:
    for name in _TP_ATTRIBUTES:
        if hasattr(tensor, name):
            raise AssertionError(f"{name} is already set on the tensor")
    tensor.tensor_model_parallel = is_parallel  # type: ignore[attr-defined]
    tensor.partition_dim = dim  # type: ignore[attr-defined]
    tensor.partition_stride = stride  # type: ignore[attr-defined]
    tensor.num_partitions = num_partitions  # type: ignore[attr-defined]


def set_defaults_if_not_set_tensor_model_parallel_attributes(tensor: torch.Tensor) -> None:
    for name, value in zip(_TP_ATTRIBUTES, (False, -1, 1, 1), strict=True):
        if not hasattr(tensor, name):
            setattr(tensor, name, value)


def copy_tensor_model_parallel_attributes(destination: torch.Tensor, source: torch.Tensor) -> None:
    for name in _TP_ATTRIBUTES:
        if hasattr(source, name):
            setattr(destination, name, getattr(source, name))


def param_is_not_tensor_parallel_duplicate(param: torch.Tensor) -> bool:
    return bool(getattr(param, "tensor_model_parallel", False)) or tp.tp_rank() == 0


# -- helpers -------------------------------------------------------------------------------------
def divide(numerator: int, denominator: int) -> int:
    if numerator % denominator:
        raise AssertionError(f"{numerator} is not divisible by {denominator}")
    return numerator // denominator


def split_tensor_along_last_dim(
    tensor: torch.Tensor, num_partitions: int, contiguous_split_chunks: bool = False
) -> tuple[torch.Tensor, ...]:
    parts = torch.split(tensor, divide(tensor.shape[-1], num_partitions), dim=-1)
    return tuple(p.contiguous() for p in parts) if contiguous_split_chunks else parts


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


def _sharded(
    full_shape: tuple[int, int],
    partition_dim: int,
    init_method: Callable[[torch.Tensor], Any],
    dtype: torch.dtype,
    device: Any,
) -> nn.Parameter:
    """This rank's slice of a full fp32 weight initialised on the CPU (neuronx-distributed's CPU path)."""
    master = torch.empty(full_shape, dtype=torch.float32)
    init_method(master)
    size, rank = tp.tp_size(), tp.tp_rank()
    shard = master.chunk(size, dim=partition_dim)[rank].to(dtype).contiguous()
    param = nn.Parameter(shard.to(device) if device is not None else shard)
    set_tensor_model_parallel_attributes(param, True, partition_dim, 1, size)
    return param


def _default_linear_init(weight: torch.Tensor) -> None:
    nn.init.kaiming_uniform_(weight, a=math.sqrt(5))


def _bias(size: int, fan_in: int, dtype: torch.dtype, device: Any) -> nn.Parameter:
    bias = torch.empty(size, dtype=dtype)
    bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    nn.init.uniform_(bias, -bound, bound)
    return nn.Parameter(bias.to(device) if device is not None else bias)


def _require_model_parallel(layer: str) -> None:
    if not nxd_state.model_parallel_is_initialized():
        raise RuntimeError(f"{layer}: call parallel_state.initialize_model_parallel() first")


# -- layers --------------------------------------------------------------------------------------
class ColumnParallelLinear(nn.Module):
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
        super().__init__()
        _require_model_parallel("ColumnParallelLinear")
        _refuse("ColumnParallelLinear", stride=stride, pad=pad, sequence_dimension=sequence_dimension, **options)
        if gather_output and sequence_parallel_enabled:
            raise ValueError("ColumnParallelLinear: gather_output is not supported with sequence parallelism")
        self.input_size, self.output_size = input_size, output_size
        self.output_size_per_partition = divide(output_size, tp.tp_size())
        self.gather_output = gather_output
        self.sequence_parallel_enabled = sequence_parallel_enabled
        self.skip_bias_add = skip_bias_add
        self.weight = _sharded((output_size, input_size), 0, init_method or _default_linear_init, dtype, device)
        if bias:
            self.bias: nn.Parameter | None = _bias(
                output_size if gather_output else self.output_size_per_partition, input_size, dtype, device
            )
            if not gather_output:
                set_tensor_model_parallel_attributes(self.bias, True, 0, 1, tp.tp_size())
        else:
            self.register_parameter("bias", None)

    def forward(self, input: torch.Tensor) -> Any:
        if self.sequence_parallel_enabled and tp.tp_size() > 1:
            out = tp.sequence_parallel_linear(input, self.weight, None)
        else:
            out = F.linear(tp.copy_to_tp_region(input), self.weight)
        if self.gather_output:
            out = tp.gather_from_tp_region(out)
        if self.skip_bias_add:
            return out, self.bias
        return out if self.bias is None else out + self.bias


class RowParallelLinear(nn.Module):
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
        super().__init__()
        _require_model_parallel("RowParallelLinear")
        _refuse("RowParallelLinear", stride=stride, pad=pad, sequence_dimension=sequence_dimension, **options)
        if sequence_parallel_enabled and not input_is_parallel:
            raise RuntimeError("RowParallelLinear: sequence parallelism needs input_is_parallel=True")
        self.input_size, self.output_size = input_size, output_size
        self.input_size_per_partition = divide(input_size, tp.tp_size())
        self.input_is_parallel = input_is_parallel
        self.sequence_parallel_enabled = sequence_parallel_enabled
        self.skip_bias_add = skip_bias_add
        self.reduce_output = reduce_output
        self.weight = _sharded((output_size, input_size), 1, init_method or _default_linear_init, dtype, device)
        if bias:
            self.bias: nn.Parameter | None = _bias(output_size, self.input_size_per_partition, dtype, device)
            self.bias.sequence_parallel_enabled = sequence_parallel_enabled  # type: ignore[attr-defined]
        else:
            self.register_parameter("bias", None)

    def forward(self, input: torch.Tensor) -> Any:
        x = input if self.input_is_parallel else tp.scatter_to_tp_region(input)
        out = F.linear(x, self.weight)
        if self.reduce_output:
            sp = self.sequence_parallel_enabled and tp.tp_size() > 1
            out = tp.reduce_scatter_to_sp_region(out) if sp else tp.reduce_from_tp_region(out)
        if self.skip_bias_add:
            return out, self.bias
        return out if self.bias is None else out + self.bias


class ParallelEmbedding(nn.Module):
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
        super().__init__()
        _require_model_parallel("ParallelEmbedding")
        _refuse("ParallelEmbedding", pad=pad, **options)
        for name, value in (
            ("max_norm", max_norm),
            ("scale_grad_by_freq", scale_grad_by_freq or None),
            ("sparse", sparse or None),
            ("shard_across_embedding", shard_across_embedding or None),
        ):
            if value is not None:
                raise NotEmulatedError(f"neuronx_distributed ParallelEmbedding({name}={value!r})")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.num_embeddings_per_partition = divide(num_embeddings, tp.tp_size())
        self.start = tp.tp_rank() * self.num_embeddings_per_partition
        self.padding_idx = padding_idx
        self.sequence_parallel_enabled = sequence_parallel_enabled
        self.weight = _sharded((num_embeddings, embedding_dim), 0, init_method, dtype, device)
        if padding_idx is not None and self.start <= padding_idx < self.start + self.num_embeddings_per_partition:
            with torch.no_grad():
                self.weight[padding_idx - self.start].zero_()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if tp.tp_size() == 1:
            return F.embedding(ids, self.weight, self.padding_idx)
        outside = (ids < self.start) | (ids >= self.start + self.num_embeddings_per_partition)
        local = (ids - self.start).masked_fill(outside, 0)
        partial = F.embedding(local, self.weight).masked_fill(outside.unsqueeze(-1), 0.0)
        if self.sequence_parallel_enabled:
            return tp.reduce_scatter_to_sp_region(partial)
        return tp.reduce_from_tp_region(partial)


def parallel_cross_entropy(
    vocab_parallel_logits: torch.Tensor, target: torch.Tensor, label_smoothing: float = 0.0
) -> torch.Tensor:
    """Per-token cross entropy (no reduction) from this rank's vocabulary shard of the logits."""
    if label_smoothing:
        raise NotEmulatedError("neuronx_distributed parallel_cross_entropy(label_smoothing=...)")
    return tp.vocab_parallel_cross_entropy(vocab_parallel_logits, target)


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
        ranks = nxd_state._grid().group_of("dp", world.global_rank())
        collectives.group(ranks).all_reduce_(grads_list, "sum", 1.0 / dp)


def get_grad_norm(
    parameters: Iterable[torch.Tensor] | torch.Tensor, norm_type: float = 2, **options: Any
) -> torch.Tensor:
    """The gradient norm of the whole model: tensor-parallel shards count once each, replicated
    parameters once over the group (their share divided by the TP size), summed over TP."""
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    grads = [(p.grad, bool(getattr(p, "tensor_model_parallel", False))) for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    size = tp.tp_size()
    if math.isinf(norm_type):
        local = torch.stack([g.detach().abs().max().float() for g, _ in grads]).max()
        return collectives.group(_tp_ranks()).all_reduce(local.reshape(1), "max").reshape(()) if size > 1 else local
    total = torch.zeros((), dtype=torch.float32, device=grads[0][0].device)
    for g, sharded in grads:
        part = g.detach().float().norm(norm_type) ** norm_type
        total = total + (part if sharded else part / size)
    if size > 1:
        total = collectives.group(_tp_ranks()).all_reduce(total.reshape(1)).reshape(())
    return total ** (1.0 / norm_type)


def _tp_ranks() -> list[int]:
    return nxd_state._grid().group_of("tp", world.global_rank())


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
