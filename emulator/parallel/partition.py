"""How a tensor splits over the tensor-parallel ranks, and the tags that say so on a Parameter.

One vocabulary — neuronx-distributed's and Megatron-LM's — for every parallel layer, model and
gradient helper of the emulator (docs/parallel.md):

=============================  ==============================================================
tag on the Parameter           meaning
=============================  ==============================================================
``tensor_model_parallel``      each tensor-parallel rank holds a different slice (a shard)
``partition_dim``              the dimension it is split along
``partition_stride``           the stride of the split (1: contiguous slices)
``num_partitions``             how many slices (the tensor-parallel size)
``sequence_parallel_enabled``  replicated, but used on a slice of the sequence: each rank's
                               gradient is partial and is all-reduced over the TP group
=============================  ==============================================================
"""

from __future__ import annotations

from typing import Any

import torch

TENSOR_MODEL_PARALLEL = "tensor_model_parallel"
SEQUENCE_PARALLEL_ENABLED = "sequence_parallel_enabled"
TP_ATTRIBUTES = (TENSOR_MODEL_PARALLEL, "partition_dim", "partition_stride", "num_partitions")
_TP_DEFAULTS = (False, -1, 1, 1)


def divide(numerator: int, denominator: int, what: str = "", by: str = "") -> int:
    """``numerator / denominator``, or a one-line ValueError naming ``what`` is divided and ``by``
    what (``"ColumnParallelLinear output size"``, ``"tensor-parallel size"``) when it does not divide."""
    if denominator < 1 or numerator % denominator:
        size = f"{what} {numerator}".strip()
        parts = f"{by} {denominator}".strip()
        raise ValueError(f"{size} is not divisible by {parts}")
    return numerator // denominator


def split_tensor_along_last_dim(
    tensor: torch.Tensor, num_partitions: int, contiguous_split_chunks: bool = False
) -> tuple[torch.Tensor, ...]:
    """``tensor`` in ``num_partitions`` equal slices of its last dimension."""
    size = divide(tensor.shape[-1], num_partitions, "last dimension of size")
    parts = torch.split(tensor, size, dim=-1)
    return tuple(p.contiguous() for p in parts) if contiguous_split_chunks else parts


def set_tensor_model_parallel_attributes(
    tensor: torch.Tensor, is_parallel: bool, dim: int, stride: int, num_partitions: int = -1, rank_ordering: Any = None
) -> None:
    """Tag ``tensor`` as split along ``dim`` into ``num_partitions`` (an AssertionError if tagged already)."""
    for name in TP_ATTRIBUTES:
        if hasattr(tensor, name):
            raise AssertionError(f"{name} is already set on the tensor")
    for name, value in zip(TP_ATTRIBUTES, (is_parallel, dim, stride, num_partitions), strict=True):
        setattr(tensor, name, value)


def set_defaults_if_not_set_tensor_model_parallel_attributes(tensor: torch.Tensor) -> None:
    for name, value in zip(TP_ATTRIBUTES, _TP_DEFAULTS, strict=True):
        if not hasattr(tensor, name):
            setattr(tensor, name, value)


def copy_tensor_model_parallel_attributes(destination: torch.Tensor, source: torch.Tensor) -> None:
    for name in TP_ATTRIBUTES:
        if hasattr(source, name):
            setattr(destination, name, getattr(source, name))


def mark_sequence_parallel(tensor: torch.Tensor, enabled: bool = True) -> None:
    """Tag a replicated parameter used on sequence slices (its gradient is partial per rank)."""
    setattr(tensor, SEQUENCE_PARALLEL_ENABLED, enabled)


def is_tensor_parallel(tensor: torch.Tensor) -> bool:
    return bool(getattr(tensor, TENSOR_MODEL_PARALLEL, False))


def is_sequence_parallel(tensor: torch.Tensor) -> bool:
    return bool(getattr(tensor, SEQUENCE_PARALLEL_ENABLED, False))
