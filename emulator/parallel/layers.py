"""Tensor-parallel layers with Megatron-LM / neuronx-distributed semantics, written once.

Every layer here is one rank's shard: the tensor-parallel size and rank come from
:func:`emulator.parallel.comm.state` when the layer is built (shapes) and when it runs
(collectives, through the mappings of :mod:`emulator.parallel.mappings`). Sequence parallelism is
the layer's own ``sequence_parallel_enabled`` (neuronx-distributed's argument), or — ``None``,
the default — the job's setting when the layer runs. With ``tp == 1`` every layer runs exactly
the plain PyTorch ops (``F.linear``, ``F.embedding``, ``F.cross_entropy``), no mapping in between.

Parameters carry neuronx-distributed's and Megatron's tags (``tensor_model_parallel``,
``partition_dim``, ... ``sequence_parallel_enabled``; :mod:`emulator.parallel.partition`), which
the gradient helpers at the end read. How the values are initialised is a :class:`ShardInit`:
normal(0, 0.02) per shard (no values on ``meta``) for the model-scale workloads;
neuronx-distributed's adapter (``emulator.compat.nxd_layers``) passes its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from emulator.parallel import comm
from emulator.parallel.mappings import (
    TP,
    column_parallel_linear,
    gather_from_tp_region,
    reduce_from_tp_region,
    reduce_scatter_to_sp_region,
    scatter_to_tp_region,
    sequence_parallel,
    tp_rank,
    tp_size,
)
from emulator.parallel.partition import (
    divide,
    is_sequence_parallel,
    mark_sequence_parallel,
    set_tensor_model_parallel_attributes,
)


class ShardInit(Protocol):
    """How a layer makes its parameters: this rank's slice of a weight, and a bias."""

    def weight(self, full_shape: tuple[int, int], partition_dim: int) -> nn.Parameter: ...

    def bias(self, size: int, fan_in: int) -> nn.Parameter: ...


class NormalInit:
    """The model-scale default: this rank's slice drawn from normal(0, 0.02) on the current
    default device — no values on meta (a model-scale workload: no time spent making them) —
    and zero biases."""

    def weight(self, full_shape: tuple[int, int], partition_dim: int) -> nn.Parameter:
        shape = list(full_shape)
        shape[partition_dim] //= tp_size()
        w = torch.empty(*shape)
        if not w.is_meta:
            nn.init.normal_(w, std=0.02)
        return nn.Parameter(w)

    def bias(self, size: int, fan_in: int) -> nn.Parameter:
        return nn.Parameter(torch.zeros(size))


def _shard(init: ShardInit, full_shape: tuple[int, int], partition_dim: int) -> nn.Parameter:
    """This rank's slice of a weight, tagged as split along ``partition_dim``."""
    weight = init.weight(full_shape, partition_dim)
    set_tensor_model_parallel_attributes(weight, True, partition_dim, 1, tp_size())
    return weight


def _resolve_sp(enabled: bool | None) -> bool:
    """A layer's sequence-parallel flag: its own, or (None) the job's, which the layer then
    follows when it runs."""
    return comm.state().sequence_parallel if enabled is None else enabled


def _per_rank(size: int, what: str) -> int:
    return divide(size, tp_size(), what, "tensor-parallel size")


class _BiasOutput(nn.Module):
    """The bias handling column- and row-parallel layers share: added in the product when it can
    be, after the collective otherwise, or returned apart (``skip_bias_add``)."""

    bias: nn.Parameter | None
    skip_bias_add: bool

    def _finish(self, out: torch.Tensor, bias_added: bool) -> Any:
        if self.skip_bias_add:
            return out, self.bias
        return out if bias_added or self.bias is None else out + self.bias


class ColumnParallelLinear(_BiasOutput):
    """``Y = X A^T + b`` with ``A`` split by rows (output features): this rank holds
    ``weight [out/tp, in]`` and ``bias [out/tp]`` and produces ``[..., out/tp]`` (all of ``out``
    with ``gather_output=True``, where the bias is whole and added after the gather; not allowed
    under sequence parallelism). ``sequence_parallel_enabled=None`` follows the job's setting."""

    def __init__(
        self,
        input_size: int,
        output_size: int,
        bias: bool = True,
        gather_output: bool = False,
        *,
        sequence_parallel_enabled: bool | None = None,
        skip_bias_add: bool = False,
        init: ShardInit | None = None,
    ) -> None:
        super().__init__()
        sp = _resolve_sp(sequence_parallel_enabled)
        if gather_output and sp:
            raise ValueError("ColumnParallelLinear: gather_output is not supported with sequence parallelism")
        init = init or NormalInit()
        self.input_size, self.output_size = input_size, output_size
        self.output_size_per_partition = _per_rank(output_size, "ColumnParallelLinear output size")
        self.gather_output, self.skip_bias_add = gather_output, skip_bias_add
        self.sequence_parallel_enabled = sequence_parallel_enabled
        self.weight = _shard(init, (output_size, input_size), 0)
        self.bias = None
        if bias:
            self.bias = init.bias(output_size if gather_output else self.output_size_per_partition, input_size)
            if not gather_output:
                set_tensor_model_parallel_attributes(self.bias, True, 0, 1, tp_size())

    def forward(self, x: torch.Tensor) -> Any:
        fused = not (self.gather_output or self.skip_bias_add)  # the bias goes in the product
        out = column_parallel_linear(x, self.weight, self.bias if fused else None, self.sequence_parallel_enabled)
        if self.gather_output:
            out = gather_from_tp_region(out)
        return self._finish(out, fused)

    def local_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The shard's product alone, for an input already in the tensor-parallel region
        (:func:`enter_tp_region` done once for several layers reading the same input)."""
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in={self.input_size}, out={self.output_size} ({self.output_size_per_partition} per rank)"


class RowParallelLinear(_BiasOutput):
    """``Y = X A^T + b`` with ``A`` split by columns (input features): this rank holds
    ``weight [out, in/tp]`` and a full ``bias [out]`` (added once, after the reduction). The
    partial products are all-reduced, or reduce-scattered along the sequence (dim 0) under
    sequence parallelism — where the bias is applied to a slice of the sequence and tagged
    ``sequence_parallel_enabled``. ``reduce_output=False`` leaves the partial products as they are."""

    def __init__(
        self,
        input_size: int,
        output_size: int,
        bias: bool = True,
        input_is_parallel: bool = True,
        *,
        sequence_parallel_enabled: bool | None = None,
        skip_bias_add: bool = False,
        reduce_output: bool = True,
        init: ShardInit | None = None,
    ) -> None:
        super().__init__()
        sp = _resolve_sp(sequence_parallel_enabled)
        if sp and not input_is_parallel:
            raise ValueError("RowParallelLinear: sequence parallelism needs input_is_parallel=True")
        init = init or NormalInit()
        self.input_size, self.output_size = input_size, output_size
        self.input_size_per_partition = _per_rank(input_size, "RowParallelLinear input size")
        self.input_is_parallel, self.sequence_parallel_enabled = input_is_parallel, sequence_parallel_enabled
        self.skip_bias_add, self.reduce_output = skip_bias_add, reduce_output
        self.weight = _shard(init, (output_size, input_size), 1)
        self.bias = None
        if bias:
            self.bias = init.bias(output_size, self.input_size_per_partition)
            mark_sequence_parallel(self.bias, sp)

    def forward(self, x: torch.Tensor) -> Any:
        if tp_size() == 1 and not self.skip_bias_add:
            return F.linear(x, self.weight, self.bias)
        if not self.input_is_parallel:
            x = scatter_to_tp_region(x)
        out = F.linear(x, self.weight)
        if self.reduce_output:
            sp = sequence_parallel(self.sequence_parallel_enabled)
            out = reduce_scatter_to_sp_region(out) if sp else reduce_from_tp_region(out)
        return self._finish(out, False)

    def extra_repr(self) -> str:
        return f"in={self.input_size} ({self.input_size_per_partition} per rank), out={self.output_size}"


# --------------------------------------------------------------------------------------------
# Embedding and loss
# --------------------------------------------------------------------------------------------


class VocabParallelEmbedding(nn.Module):
    """Embedding table split by vocabulary rows: this rank holds rows
    ``[rank * V/tp, (rank + 1) * V/tp)``. Ids outside the range look up row 0 and are zeroed,
    then the partial embeddings are all-reduced — or reduce-scattered along dim 0 under
    sequence parallelism, so give ids as ``[s, b]`` there. The ``padding_idx`` row starts at zero
    and gets no gradient, on the rank that holds it."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        *,
        sequence_parallel_enabled: bool | None = None,
        init: ShardInit | None = None,
    ) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.num_embeddings_per_partition = _per_rank(num_embeddings, "vocabulary size")
        self.start = tp_rank() * self.num_embeddings_per_partition
        self.padding_idx, self.sequence_parallel_enabled = padding_idx, sequence_parallel_enabled
        self.weight = _shard(init or NormalInit(), (num_embeddings, embedding_dim), 0)
        local_padding = self._local_padding()
        if local_padding is not None:
            with torch.no_grad():
                self.weight[local_padding].zero_()

    def _local_padding(self) -> int | None:
        """The padding row's index in this rank's shard (None: no padding, or another rank's row)."""
        if self.padding_idx is None:
            return None
        local = self.padding_idx - self.start
        return local if 0 <= local < self.num_embeddings_per_partition else None

    def partial_lookup(self, ids: torch.Tensor) -> torch.Tensor:
        """This rank's rows of the lookup, zero for ids another rank holds (the whole lookup at TP 1)."""
        if tp_size() == 1:
            return F.embedding(ids, self.weight, self.padding_idx)
        outside = (ids < self.start) | (ids >= self.start + self.num_embeddings_per_partition)
        local = (ids - self.start).masked_fill(outside, 0)
        return F.embedding(local, self.weight, self._local_padding()).masked_fill(outside.unsqueeze(-1), 0.0)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        partial = self.partial_lookup(ids)
        if tp_size() == 1:
            return partial
        if sequence_parallel(self.sequence_parallel_enabled):
            return reduce_scatter_to_sp_region(partial)
        return reduce_from_tp_region(partial)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim} ({self.num_embeddings_per_partition} rows per rank)"


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Megatron's cross entropy over vocab-sharded logits: three all-reduces of ``[tokens]``
    fp32 tensors (the max logit — a MAX reduction —, the target's logit, the sum of exponentials)
    and no collective in backward (softmax minus one-hot, computed on the local shard)."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, start: int) -> torch.Tensor:
        per_rank = logits.shape[-1]
        logits_max = comm.all_reduce(logits.amax(dim=-1), TP, op="max")
        shifted = logits - logits_max.unsqueeze(-1)
        outside = (targets < start) | (targets >= start + per_rank)
        local_targets = (targets - start).masked_fill(outside, 0)
        predicted = shifted.gather(-1, local_targets.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        predicted = comm.all_reduce(predicted, TP)
        exp = shifted.exp()
        sum_exp = comm.all_reduce(exp.sum(dim=-1), TP)
        loss = sum_exp.log() - predicted
        ctx.save_for_backward(exp / sum_exp.unsqueeze(-1), outside, local_targets)
        return loss

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        softmax, outside, local_targets = ctx.saved_tensors
        one_hot = (~outside).to(softmax.dtype).unsqueeze(-1)
        grad_logits = softmax.scatter_add(-1, local_targets.unsqueeze(-1), -one_hot)
        return grad_logits * grad.unsqueeze(-1), None, None


def vocab_parallel_cross_entropy(
    local_logits: torch.Tensor, targets: torch.Tensor, *, ignore_index: int | None = None
) -> torch.Tensor:
    """Per-token cross entropy (fp32, shape of ``targets``) from this rank's vocabulary shard
    of the logits ``[..., V/tp]`` (as a column-parallel LM head produces them). ``tp == 1``: the
    same as ``F.cross_entropy(..., reduction="none")``. Tokens labelled ``ignore_index`` get 0."""
    logits = local_logits.float()
    if tp_size() == 1:
        flat = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            targets.reshape(-1),
            reduction="none",
            ignore_index=-100 if ignore_index is None else ignore_index,
        )
        return flat.view(targets.shape)
    start = tp_rank() * logits.shape[-1]
    if ignore_index is None:
        return _VocabParallelCrossEntropy.apply(logits, targets, start)
    ignored = targets == ignore_index
    loss = _VocabParallelCrossEntropy.apply(logits, targets.masked_fill(ignored, 0), start)
    return loss.masked_fill(ignored, 0.0)


# --------------------------------------------------------------------------------------------
# Gradients every tensor-parallel rank holds only part of
# --------------------------------------------------------------------------------------------


def sequence_parallel_parameters(params: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    """Replicated parameters used on sequence slices (norms, row-parallel biases, ... under
    sequence parallelism; tagged ``sequence_parallel_enabled``): each rank's gradient is partial
    and must be all-reduced over ``tp`` before the optimizer step (Megatron's
    ``allreduce_sequence_parallel_gradients``)."""
    return [p for p in params if is_sequence_parallel(p)]


def _accumulated_grad(param: torch.Tensor) -> torch.Tensor | None:
    return param.grad if param.grad is not None else getattr(param, "main_grad", None)


def allreduce_sequence_parallel_grads(params: Iterable[torch.Tensor]) -> None:
    """One coalesced all-reduce over ``tp`` of the gradients of
    :func:`sequence_parallel_parameters` (the bytes of all of them, as Megatron flattens them)."""
    # a parameter whose gradient accumulates in an FP32 ``main_grad`` (ZeRO-1's grad-accumulation
    # hook) has that reduced instead, as NxD's allreduce_sequence_parallel_gradients does
    grads = [g for p in sequence_parallel_parameters(params) if (g := _accumulated_grad(p)) is not None]
    if not grads or tp_size() == 1:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    flat = comm.all_reduce(flat, TP)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()
