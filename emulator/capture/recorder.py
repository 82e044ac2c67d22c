"""Collects the ops of the current step graph as :class:`OpRecord` values (thread-safe).

Backward ops run on autograd's worker thread, forward ops on the caller's: both append here.
FLOPs come from PyTorch's own formulas (``torch.utils.flop_counter.flop_registry``).
"""

from __future__ import annotations

import threading
from typing import Any

import torch
from torch.utils.flop_counter import flop_registry

from emulator.capture.ops import OpRecord, TensorMeta

_DTYPE_NAMES: dict[torch.dtype, str] = {}

# One captured op, as cheap to record as possible: (name, inputs, outputs, flops) where inputs and
# outputs are tuples of (torch.Size, torch.dtype). Hashable, so a whole step is a dict key.
RawOp = tuple[str, tuple, tuple, int]


def dtype_name(dtype: torch.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


def _sig(values: Any, out: list) -> list:
    """(shape, dtype) of the tensors among ATen arguments/results (one level of nesting)."""
    if isinstance(values, torch.Tensor):
        out.append((values.shape, values.dtype))
    elif type(values) in (list, tuple):
        for v in values:
            if isinstance(v, torch.Tensor):
                out.append((v.shape, v.dtype))
            elif type(v) in (list, tuple):
                _sig(v, out)
    elif isinstance(values, dict):
        _sig(list(values.values()), out)
    return out


def count_flops(func: Any, args: tuple, kwargs: dict, out: Any) -> int:
    formula = flop_registry.get(func._overloadpacket)  # matmul-family ops; 0 for the rest
    if formula is None:
        return 0
    try:
        return int(formula(*args, **kwargs, out_val=out))
    except Exception:  # a formula that does not accept this overload's arguments: no count
        return 0


def _meta(sig: tuple) -> tuple[TensorMeta, ...]:
    metas = []
    for shape, dtype in sig:
        numel = 1
        for d in shape:
            numel *= d
        metas.append(TensorMeta(tuple(shape), dtype_name(dtype), numel * dtype.itemsize))
    return tuple(metas)


class CapturedGraph:
    """The ops of one step. ``key`` identifies the graph (equal ops, shapes and dtypes give an
    equal key); :meth:`ops` builds the cost model's records, only needed for a new graph."""

    def __init__(self, raw: list[RawOp]) -> None:
        self.key: tuple[RawOp, ...] = tuple(raw)

    def __len__(self) -> int:
        return len(self.key)

    def ops(self) -> list[OpRecord]:
        return [OpRecord(name, _meta(ins), _meta(outs), flops) for name, ins, outs, flops in self.key]


class Recorder:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ops: list[RawOp] = []

    def on_op(self, name: str, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        ins = _sig(args, [])
        if kwargs:
            _sig(kwargs, ins)
        raw = (name, tuple(ins), tuple(_sig(out, [])), count_flops(func, args, kwargs, out))
        with self._lock:
            self._ops.append(raw)

    def take_graph(self) -> CapturedGraph:
        """The ops recorded since the last call (the step graph), and start a new one."""
        with self._lock:
            ops, self._ops = self._ops, []
        return CapturedGraph(ops)

    def take(self) -> list[OpRecord]:
        return self.take_graph().ops()
