"""What the capture layer records per ATen op: the input of the cost model (torch-free data).

One :class:`OpRecord` per op executed on an emulated-device tensor. Shapes, dtypes and byte
counts come from the real tensors (or the meta tensors of a model-scale workload); ``flops`` is
PyTorch's own count for the op (``torch.utils.flop_counter``), 0 where PyTorch counts none.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TensorMeta:
    shape: tuple[int, ...]
    dtype: str  # torch dtype name without the "torch." prefix: "float32", "bfloat16", "int64", ...
    nbytes: int  # numel * element size

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


@dataclass(frozen=True)
class OpRecord:
    name: str  # ATen op packet, e.g. "aten.mm", "aten.add", "aten._softmax", "aten.embedding"
    inputs: tuple[TensorMeta, ...]  # tensor arguments, in argument order (lists flattened)
    outputs: tuple[TensorMeta, ...]  # tensor results
    flops: int = 0  # floating-point operations (2 per multiply-add), from torch.utils.flop_counter

    def signature(self) -> tuple[object, ...]:
        """What identifies the op inside a graph hash: name, shapes and dtypes."""
        return (
            self.name,
            tuple((t.shape, t.dtype) for t in self.inputs),
            tuple((t.shape, t.dtype) for t in self.outputs),
        )


@dataclass(frozen=True)
class CollectiveRecord:
    """A collective the step performs, on the NeuronCores of its replica group (docs/collectives.md)."""

    kind: str  # "all_reduce", "all_gather", "reduce_scatter", "broadcast", "send"
    nbytes: int  # as nccom-test sizes it: all-reduce, broadcast, send the buffer; all-gather the output
    cores: tuple[int, ...]  # the group's global NeuronCore ids (node * cores per node + core), group order
    concurrent: tuple[tuple[int, ...], ...] = ()  # the other groups doing the same collective at the same time
    ranks: tuple[int, ...] = ()  # the group's global ranks (a profile's replica group)
    after_op: int | None = None  # ops captured in the step before it (None: not known, after the last)
