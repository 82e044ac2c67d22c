"""Tensor-parallel mappings with Megatron-LM / neuronx-distributed semantics: the collectives
between the tensor-parallel layers (``emulator.parallel.layers``), as autograd functions.

The tensor-parallel size and rank and the sequence-parallel flag come from
:func:`emulator.parallel.comm.state` when a mapping runs. The collectives go through
:mod:`emulator.parallel.comm` with group ``"tp"``: recorded for the cost model on ``meta``, the
identity when the group has one rank (then every mapping is skipped: plain PyTorch ops).

The four mappings (Megatron's ``tensor_parallel/mappings.py``):

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
(split / all-gather), scatter_to_sp_region (split / all-gather along the sequence), and the
column-parallel product of a sequence-parallel input (:func:`sequence_parallel_linear`).

Layout: under sequence parallelism the sequence is dimension 0 (Megatron's ``[s, b, h]``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from emulator.parallel import comm
from emulator.parallel.partition import divide

TP = "tp"


def tp_size() -> int:
    return comm.state().tp


def tp_rank() -> int:
    return comm.state().tp_rank


def sequence_parallel(enabled: bool | None = None) -> bool:
    """Sequence parallelism is on — a layer's own ``enabled`` flag, else the job's — and means
    something (more than one tensor-parallel rank)."""
    state = comm.state()
    return (state.sequence_parallel if enabled is None else enabled) and state.tp > 1


def _split(x: torch.Tensor, dim: int) -> torch.Tensor:
    """This rank's ``1/tp`` slice of ``x`` along ``dim`` (no communication)."""
    state = comm.state()
    size = divide(x.shape[dim], state.tp, f"dimension {dim} of size", "tensor-parallel size")
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
    gradient is reduce-scattered back to ``[s/tp, ...]``. Backward overlaps as Megatron's does:
    the all-gather runs while the input gradient is computed, the reduce-scatter while the weight
    gradient is (:func:`comm.overlapped`)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return F.linear(comm.all_gather(x, 0, TP), weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        grad_x = grad_w = grad_b = partial = total = None
        with comm.overlapped():
            if need_w:
                total = comm.all_gather(x, 0, TP)  # the gathered input was not kept: gather it again
            if need_x:
                partial = grad.matmul(weight)
        with comm.overlapped():
            if partial is not None:
                grad_x = comm.reduce_scatter(partial, 0, TP)
            if total is not None:
                grad_w = grad.reshape(-1, grad.shape[-1]).t().matmul(total.reshape(-1, total.shape[-1]))
        if need_b and ctx.has_bias:
            grad_b = grad.reshape(-1, grad.shape[-1]).sum(0)
        return grad_x, grad_w, grad_b


def sequence_parallel_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """A column-parallel product of a ``[s/tp, ...]`` input: all-gathered along the sequence
    forward, the input gradient reduce-scattered back backward (:class:`_LinearGatheredInput`)."""
    return _LinearGatheredInput.apply(x, weight, bias)


def enter_tp_region(x: torch.Tensor, sequence_parallel_enabled: bool | None = None) -> torch.Tensor:
    """The input of column-parallel layers as they all see it: the full tensor (all-gathered
    along the sequence under sequence parallelism, else a copy whose gradient is all-reduced)."""
    return gather_from_sp_region(x) if sequence_parallel(sequence_parallel_enabled) else copy_to_tp_region(x)


def column_parallel_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    sequence_parallel_enabled: bool | None = None,
) -> torch.Tensor:
    """``x`` replicated (``[s/tp, ...]`` under sequence parallelism) times this rank's rows of
    ``weight``: the first half of a Megatron MLP/attention block. Also the LM head over a tied
    vocab-parallel embedding."""
    if tp_size() == 1:
        return F.linear(x, weight, bias)
    if sequence_parallel(sequence_parallel_enabled):
        return _LinearGatheredInput.apply(x, weight, bias)
    return F.linear(copy_to_tp_region(x), weight, bias)
