"""Collects the ops of the current step graph as :class:`OpRecord` values (thread-safe).

Backward ops run on autograd's worker thread, forward ops on the caller's: both append here.
FLOPs come from PyTorch's own formulas (``torch.utils.flop_counter.flop_registry``).

Two ways in, one result. :meth:`Recorder.on_op` is the general hook (any caller, any op): it
reads the shapes and dtypes of the op's tensors and counts its FLOPs. The device layer
(:mod:`emulator.capture.tensor`) knows when the hook is a :class:`Recorder`'s and then hands it a
ready :data:`RawOp` through ``Recorder.record`` instead, built by :func:`raw_op` from the
op's flat tensor lists (or taken from its per-signature cache on a model-scale workload).
Both give the same records; ``tests/test_capture.py`` holds them to it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.flop_counter import flop_registry

from emulator.capture import attention_flops  # noqa: F401  (registers the CPU flash-attention FLOP formulas)
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


# -- FLOPs, once per distinct call -------------------------------------------------------------
# PyTorch's formulas (those registered without ``get_raw``) see only the shapes of the tensors and
# the other argument values, so the count of a call is a function of (op, tensor shapes/dtypes,
# other arguments): it is computed the first time such a call is seen and looked up afterwards.
_FLOPS: dict[tuple, int] = {}
_FLOPS_LIMIT = 100_000  # distinct calls kept (a bound, in case of ever-new arguments)


class _Unkeyable(Exception):
    pass


def _plain_key(values: Any) -> Any:
    """The non-tensor structure of ATen arguments as a hashable value (tensors -> None)."""
    if isinstance(values, torch.Tensor):
        return None
    cls = type(values)
    if cls is list or cls is tuple:
        return (cls, tuple(_plain_key(v) for v in values))
    if cls is dict:
        return tuple((k, _plain_key(v)) for k, v in values.items())
    if cls in (int, float, bool, complex):
        return (cls, values)
    if values is None or cls in (str, torch.dtype, torch.device, torch.layout, torch.memory_format):
        return values
    raise _Unkeyable


def _shape_only(formula: Any) -> bool:
    # shape-based formulas are wrapped by flop_counter.shape_wrapper (functools.wraps)
    return getattr(formula, "__wrapped__", None) is not None


def flops_of(func: Any, formula: Any, ins: tuple, outs: tuple, args: Any, kwargs: dict, out: Any) -> int:
    """``count_flops`` for an op that has a formula, cached per (op, signature, other arguments)."""
    if not _shape_only(formula):
        return count_flops(func, args, kwargs, out)
    try:
        key = (func, ins, outs, _plain_key(args), _plain_key(kwargs))
        hash(key)
    except (_Unkeyable, TypeError):
        return count_flops(func, args, kwargs, out)
    flops = _FLOPS.get(key)
    if flops is None:
        flops = count_flops(func, args, kwargs, out)
        if len(_FLOPS) >= _FLOPS_LIMIT:
            _FLOPS.clear()
        _FLOPS[key] = flops
    return flops


def raw_op(name: str, func: Any, formula: Any, ins: list, outs: list, args: Any, kwargs: dict, out: Any) -> RawOp:
    """The record of one op from its flat tensor lists (arguments in order, results in order):
    what :meth:`Recorder.on_op` computes, without walking the arguments again."""
    in_sig = tuple([(t.shape, t.dtype) for t in ins])
    out_sig = tuple([(t.shape, t.dtype) for t in outs])
    flops = 0 if formula is None else flops_of(func, formula, in_sig, out_sig, args, kwargs, out)
    return (name, in_sig, out_sig, flops)


def tensor_metas(sig: tuple) -> tuple[TensorMeta, ...]:
    """The cost model's view of (shape, dtype) pairs."""
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
        return [OpRecord(name, tensor_metas(ins), tensor_metas(outs), flops) for name, ins, outs, flops in self.key]


class Recorder:
    """The ops of the current step graph. Lock-free under the GIL: ops are appended with
    ``list.append`` (atomic) and :meth:`take_graph` removes exactly the ops it copied, so an op
    appended meanwhile by another thread stays for the next graph."""

    def __init__(self) -> None:
        self._ops: list[RawOp] = []
        self.record = self._ops.append  # the device layer's fast path: append a ready RawOp

    def on_op(self, name: str, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        ins = _sig(args, [])
        if kwargs:
            _sig(kwargs, ins)
        in_sig, out_sig = tuple(ins), tuple(_sig(out, []))
        formula = flop_registry.get(func._overloadpacket) if hasattr(func, "_overloadpacket") else None
        flops = 0 if formula is None else flops_of(func, formula, in_sig, out_sig, args, kwargs, out)
        self._ops.append((name, in_sig, out_sig, flops))

    def pending(self) -> int:
        """Ops recorded since the last :meth:`take_graph` (where a collective sits in the step)."""
        return len(self._ops)

    def take_graph(self) -> CapturedGraph:
        """The ops recorded since the last call (the step graph), and start a new one."""
        ops = self._ops
        n = len(ops)
        graph = ops[:n]
        del ops[:n]
        return CapturedGraph(graph)

    def take(self) -> list[OpRecord]:
        return self.take_graph().ops()
