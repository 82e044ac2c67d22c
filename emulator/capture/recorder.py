"""Collects the ops of the current step graph as :class:`OpRecord` values (thread-safe).

Backward ops run on autograd's worker thread, forward ops on the caller's: both append here.
FLOPs come from PyTorch's own formulas (``torch.utils.flop_counter.flop_registry``).
"""

from __future__ import annotations

import threading
from typing import Any

import torch
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from emulator.capture.ops import OpRecord, TensorMeta

_DTYPE_NAMES: dict[torch.dtype, str] = {}


def dtype_name(dtype: torch.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


def tensor_meta(t: torch.Tensor) -> TensorMeta:
    return TensorMeta(tuple(t.shape), dtype_name(t.dtype), t.numel() * t.element_size())


def _tensors(tree: Any) -> tuple[TensorMeta, ...]:
    return tuple(tensor_meta(x) for x in tree_flatten(tree)[0] if isinstance(x, torch.Tensor))


def count_flops(func: Any, args: tuple, kwargs: dict, out: Any) -> int:
    formula = flop_registry.get(func._overloadpacket)
    if formula is None:
        return 0
    try:
        return int(formula(*args, **kwargs, out_val=out))
    except Exception:  # a formula that does not accept this overload's arguments: no count
        return 0


class Recorder:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ops: list[OpRecord] = []

    def on_op(self, name: str, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        record = OpRecord(
            name=name,
            inputs=_tensors((args, kwargs)),
            outputs=_tensors(out),
            flops=count_flops(func, args, kwargs, out),
        )
        with self._lock:
            self._ops.append(record)

    def take(self) -> list[OpRecord]:
        """The ops recorded since the last call (the step graph), and start a new one."""
        with self._lock:
            ops, self._ops = self._ops, []
        return ops

    def pending(self) -> int:
        with self._lock:
            return len(self._ops)
