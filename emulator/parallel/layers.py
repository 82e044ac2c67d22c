"""Tensor-parallel building blocks with Megatron-LM / neuronx-distributed semantics.

Every layer here is one rank's shard: the tensor-parallel size and rank and the
sequence-parallel flag come from :func:`emulator.parallel.comm.state` when the layer is built
(shapes) and when it runs (collectives). The collectives go through
:mod:`emulator.parallel.comm` with group ``"tp"``: recorded for the cost model on ``meta``, the
identity when the group has one rank. With ``tp == 1`` every layer runs exactly the plain PyTorch
ops (``F.linear``, ``F.embedding``, ``F.cross_entropy``), no mapping in between.

The four mappings (autograd functions; Megatron's ``tensor_parallel/mappings.py``):

=============================  ==========================  ==========================
mapping                        forward                     backward
=============================  ==========================  ==========================
copy_to_tp_region              identity                    all-reduce
reduce_from_tp_region          all-reduce                  identity
gather_from_sp_region          all-gather (sequence dim)   reduce-scatter (sequence dim)
reduce_scatter_to_sp_region    reduce-scatter (seq. dim)   all-gather (sequence dim)
=============================  ==========================  ==========================

plus two that move along the hidden (last) dimension for ``gather_output`` /
``input_is_parallel=False``: gather_from_tp_region (all-gather / split) and scatter_to_tp_region
(split / all-gather).

Layout: under sequence parallelism the sequence is dimension 0 (Megatron's ``[s, b, h]``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from emulator.parallel import comm

TP = "tp"


def tp_size() -> int:
    return comm.state().tp


def tp_rank() -> int:
    return comm.state().tp_rank


def sequence_parallel() -> bool:
    """Sequence parallelism is on (and means something: more than one tensor-parallel rank)."""
    state = comm.state()
    return state.sequence_parallel and state.tp > 1


def divide(numerator: int, denominator: int, what: str) -> int:
    """``numerator / denominator``, or a one-line ValueError naming ``what`` when it does not divide."""
    if denominator < 1 or numerator % denominator:
        raise ValueError(f"{what} {numerator} is not divisible by tensor-parallel size {denominator}")
    return numerator // denominator


def _split(x: torch.Tensor, dim: int) -> torch.Tensor:
    """This rank's ``1/tp`` slice of ``x`` along ``dim`` (no communication)."""
    state = comm.state()
    size = divide(x.shape[dim], state.tp, f"dimension {dim} of size")
    return x.narrow(dim, state.tp_rank * size, size)


# --------------------------------------------------------------------------------------------
# Mappings
# --------------------------------------------------------------------------------------------


class _CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return comm.all_reduce(grad, TP)


class _ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return comm.all_reduce(x, TP)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad


class _GatherFromSP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, reduce_grad: bool) -> torch.Tensor:
        ctx.reduce_grad = reduce_grad
        return comm.all_gather(x, 0, TP)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        if ctx.reduce_grad:
            return comm.reduce_scatter(grad, 0, TP), None
        return _split(grad, 0), None


class _ReduceScatterToSP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return comm.reduce_scatter(x, 0, TP)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return comm.all_gather(grad, 0, TP)


class _GatherFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return comm.all_gather(x, x.dim() - 1, TP)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return _split(grad, grad.dim() - 1)


class _ScatterToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return _split(x, x.dim() - 1)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return comm.all_gather(grad, grad.dim() - 1, TP)


class _ScatterToSP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return _split(x, 0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return comm.all_gather(grad, 0, TP)


def scatter_to_sp_region(x: torch.Tensor) -> torch.Tensor:
    """Keep this rank's slice of the sequence (dim 0) forward, all-gather backward."""
    return x if tp_size() == 1 else _ScatterToSP.apply(x)


def copy_to_tp_region(x: torch.Tensor) -> torch.Tensor:
    """Identity forward, all-reduce of the gradient backward (input of a column-parallel layer)."""
    return x if tp_size() == 1 else _CopyToTP.apply(x)


def reduce_from_tp_region(x: torch.Tensor) -> torch.Tensor:
    """All-reduce forward, identity backward (output of a row-parallel layer)."""
    return x if tp_size() == 1 else _ReduceFromTP.apply(x)


def gather_from_sp_region(x: torch.Tensor, *, reduce_grad: bool = True) -> torch.Tensor:
    """All-gather along the sequence (dim 0) forward; reduce-scatter backward, or only this
    rank's slice of the gradient when ``reduce_grad`` is False (the consumer's gradient is
    already complete on every rank: Megatron's ``tensor_parallel_output_grad=False``)."""
    return x if tp_size() == 1 else _GatherFromSP.apply(x, reduce_grad)


def reduce_scatter_to_sp_region(x: torch.Tensor) -> torch.Tensor:
    """Reduce-scatter along the sequence (dim 0) forward, all-gather backward."""
    return x if tp_size() == 1 else _ReduceScatterToSP.apply(x)


def gather_from_tp_region(x: torch.Tensor) -> torch.Tensor:
    """All-gather along the last dimension forward, keep this rank's slice backward."""
    return x if tp_size() == 1 else _GatherFromTP.apply(x)


def scatter_to_tp_region(x: torch.Tensor) -> torch.Tensor:
    """Keep this rank's slice of the last dimension forward, all-gather backward."""
    return x if tp_size() == 1 else _ScatterToTP.apply(x)


# --------------------------------------------------------------------------------------------
# Linear layers
# --------------------------------------------------------------------------------------------


class _LinearGatheredInput(torch.autograd.Function):
    """Column-parallel linear under sequence parallelism (Megatron's
    ``LinearWithGradAccumulationAndAsyncCommunication`` with ``sequence_parallel``; NxD does the
    same): all-gather the ``[s/tp, ...]`` input along the sequence, multiply; keep only the local
    input for backward, where it is all-gathered again for the weight gradient, and the input
    gradient is reduce-scattered back to ``[s/tp, ...]``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return F.linear(comm.all_gather(x, 0, TP), weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        grad_x = grad_w = grad_b = None
        if need_w:
            total = comm.all_gather(x, 0, TP)  # the gathered input was not kept: gather it again
            grad_w = grad.reshape(-1, grad.shape[-1]).t().matmul(total.reshape(-1, total.shape[-1]))
        if need_x:
            grad_x = comm.reduce_scatter(grad.matmul(weight), 0, TP)
        if need_b and ctx.has_bias:
            grad_b = grad.reshape(-1, grad.shape[-1]).sum(0)
        return grad_x, grad_w, grad_b


def sequence_parallel_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """A column-parallel product of a ``[s/tp, ...]`` input: all-gathered along the sequence
    forward, the input gradient reduce-scattered back backward (:class:`_LinearGatheredInput`)."""
    return _LinearGatheredInput.apply(x, weight, bias)


def enter_tp_region(x: torch.Tensor) -> torch.Tensor:
    """The input of column-parallel layers as they all see it: the full tensor (all-gathered
    along the sequence under sequence parallelism, else a copy whose gradient is all-reduced)."""
    return gather_from_sp_region(x) if sequence_parallel() else copy_to_tp_region(x)


def column_parallel_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x`` replicated (``[s/tp, ...]`` under sequence parallelism) times this rank's rows of
    ``weight``: the first half of a Megatron MLP/attention block. Also the LM head over a tied
    vocab-parallel embedding."""
    if tp_size() == 1:
        return F.linear(x, weight, bias)
    if sequence_parallel():
        return _LinearGatheredInput.apply(x, weight, bias)
    return F.linear(copy_to_tp_region(x), weight, bias)


def _empty_weight(*shape: int) -> nn.Parameter:
    """A parameter of ``shape`` on the current default device; normal(0, 0.02) unless on meta
    (a model-scale workload: no values, and no time spent making them)."""
    w = torch.empty(*shape)
    if not w.is_meta:
        nn.init.normal_(w, std=0.02)
    return nn.Parameter(w)


def _zeros(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.zeros(*shape))


class ColumnParallelLinear(nn.Module):
    """``Y = X A^T + b`` with ``A`` split by rows (output features): this rank holds
    ``weight [out/tp, in]`` and ``bias [out/tp]`` and produces ``[..., out/tp]`` (all of
    ``out`` with ``gather_output=True``, not allowed under sequence parallelism)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, gather_output: bool = False) -> None:
        super().__init__()
        tp = tp_size()
        if gather_output and sequence_parallel():
            raise ValueError("ColumnParallelLinear: gather_output is not supported with sequence parallelism")
        self.in_features = in_features
        self.out_features = out_features
        self.out_per_rank = divide(out_features, tp, "ColumnParallelLinear output size")
        self.gather_output = gather_output
        self.weight = _empty_weight(self.out_per_rank, in_features)
        self.bias = _zeros(self.out_per_rank) if bias else None
        if self.bias is not None:
            self.bias.tensor_parallel = True  # type: ignore[attr-defined]  # a Megatron-style tag on the Parameter
        self.weight.tensor_parallel = True  # type: ignore[attr-defined]  # a Megatron-style tag on the Parameter

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = column_parallel_linear(x, self.weight, self.bias)
        return gather_from_tp_region(out) if self.gather_output else out

    def local_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The shard's product alone, for an input already in the tensor-parallel region
        (:func:`enter_tp_region` done once for several layers reading the same input)."""
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features} ({self.out_per_rank} per rank)"


class RowParallelLinear(nn.Module):
    """``Y = X A^T + b`` with ``A`` split by columns (input features): this rank holds
    ``weight [out, in/tp]`` and a full ``bias [out]`` (added once, after the reduction). The
    partial products are all-reduced, or reduce-scattered along the sequence (dim 0) under
    sequence parallelism."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, input_is_parallel: bool = True) -> None:
        super().__init__()
        tp = tp_size()
        if not input_is_parallel and sequence_parallel():
            raise ValueError("RowParallelLinear: sequence parallelism needs input_is_parallel=True")
        self.in_features = in_features
        self.out_features = out_features
        self.in_per_rank = divide(in_features, tp, "RowParallelLinear input size")
        self.input_is_parallel = input_is_parallel
        self.weight = _empty_weight(out_features, self.in_per_rank)
        self.weight.tensor_parallel = True  # type: ignore[attr-defined]  # a Megatron-style tag on the Parameter
        self.bias = _zeros(out_features) if bias else None
        if self.bias is not None and sequence_parallel():
            self.bias.sequence_parallel = True  # type: ignore[attr-defined]  # grads partial per rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if tp_size() == 1:
            return F.linear(x, self.weight, self.bias)
        if not self.input_is_parallel:
            x = scatter_to_tp_region(x)
        partial = F.linear(x, self.weight)
        out = reduce_scatter_to_sp_region(partial) if sequence_parallel() else reduce_from_tp_region(partial)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return f"in={self.in_features} ({self.in_per_rank} per rank), out={self.out_features}"


# --------------------------------------------------------------------------------------------
# Embedding and loss
# --------------------------------------------------------------------------------------------


class VocabParallelEmbedding(nn.Module):
    """Embedding table split by vocabulary rows: this rank holds rows
    ``[rank * V/tp, (rank + 1) * V/tp)``. Ids outside the range look up row 0 and are zeroed,
    then the partial embeddings are all-reduced — or reduce-scattered along dim 0 under
    sequence parallelism, so give ids as ``[s, b]`` there."""

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__()
        tp = tp_size()
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.per_rank = divide(num_embeddings, tp, "vocabulary size")
        self.start = tp_rank() * self.per_rank
        self.weight = _empty_weight(self.per_rank, embedding_dim)
        self.weight.tensor_parallel = True  # type: ignore[attr-defined]  # a Megatron-style tag on the Parameter

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if tp_size() == 1:
            return F.embedding(ids, self.weight)
        outside = (ids < self.start) | (ids >= self.start + self.per_rank)
        local = (ids - self.start).masked_fill(outside, 0)
        partial = F.embedding(local, self.weight).masked_fill(outside.unsqueeze(-1), 0.0)
        return reduce_scatter_to_sp_region(partial) if sequence_parallel() else reduce_from_tp_region(partial)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim} ({self.per_rank} rows per rank)"


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


def sequence_parallel_parameters(module: nn.Module) -> list[nn.Parameter]:
    """Replicated parameters used on sequence slices (norms, row-parallel biases, ... under
    sequence parallelism): each rank's gradient is partial and must be all-reduced over ``tp``
    before the optimizer step (Megatron's ``allreduce_sequence_parallel_gradients``)."""
    return [p for p in module.parameters() if getattr(p, "sequence_parallel", False)]


def allreduce_sequence_parallel_grads(module: nn.Module) -> None:
    """One coalesced all-reduce over ``tp`` of the gradients of
    :func:`sequence_parallel_parameters` (the bytes of all of them, as Megatron flattens them)."""
    grads = [p.grad for p in sequence_parallel_parameters(module) if p.grad is not None]
    if not grads or tp_size() == 1:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    flat = comm.all_reduce(flat, TP)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


__all__ = [
    "ColumnParallelLinear",
    "RowParallelLinear",
    "VocabParallelEmbedding",
    "allreduce_sequence_parallel_grads",
    "column_parallel_linear",
    "copy_to_tp_region",
    "divide",
    "enter_tp_region",
    "gather_from_sp_region",
    "gather_from_tp_region",
    "reduce_from_tp_region",
    "reduce_scatter_to_sp_region",
    "scatter_to_sp_region",
    "scatter_to_tp_region",
    "sequence_parallel",
    "sequence_parallel_linear",
    "sequence_parallel_parameters",
    "tp_rank",
    "tp_size",
    "vocab_parallel_cross_entropy",
]
