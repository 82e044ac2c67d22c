"""The meta fast path of the device layer (:mod:`emulator.capture.tensor`): results of ops on
meta device tensors rebuilt from a per-signature template.

On meta tensors (model-scale work) an op's results are a function of its inputs' metadata
(shape, stride, offset, dtype) and its other arguments: the first call of each distinct
signature runs PyTorch's meta kernel and keeps a template of the results — new tensors, views of
an input, the input itself (in-place ops) — with the op's record; later calls build the results
from the template without running the kernel (most of PyTorch's meta kernels are Python
reference implementations, tens to hundreds of microseconds each). Ops whose result cannot be
rebuilt that way (they change an input's metadata, alias it ambiguously, return something else
than tensors) always run their kernel. A result built from a template is *lazy*: its meta
``_inner`` tensor is made on first use (views share their base's storage then as they would
have), and the ledger is told its size and base without it (``MemoryLedger.on_alloc_lazy``). A
step whose every op hits the cache makes none.

The device layer imports this module and hands it, once, what it works on (:func:`bind`): the
device tensor class, its hooks and argument walks — so the dependency goes one way.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import torch

from emulator.capture.recorder import RawOp, raw_op

META = torch.device("meta")
_make_wrapper = torch.Tensor._make_wrapper_subclass
_STRIDED = torch.strided

# the device layer's walks over an op's arguments: unwrap a sequence, unwrap keyword arguments,
# rewrap results (each also collecting the inner tensors in order)
Walks = tuple[Callable[[Any, dict, list], list], Callable[[dict, dict, list], dict], Callable[[Any, dict, list], Any]]

# What the device layer binds (see bind): read on every op, so plain module globals.
_Wrapper: Any = None  # the device tensor class (tensor.NeuronTensor)
_hooks: Any = None  # its process-wide settings (tensor.hooks)
DEVICE: Any = None
is_device: Callable[[Any], bool]
_unwrap_seq: Callable[[Any, dict, list], list]
_unwrap_kwargs: Callable[[dict, dict, list], dict]
_rewrap: Callable[[Any, dict, list], Any]


def bind(wrapper: type, hooks: Any, device: torch.device, device_test: Callable[[Any], bool], walks: Walks) -> None:
    """The device tensor class, its hooks and device, the device test, and the argument walks
    (unwrap a sequence, unwrap keyword arguments, rewrap results) of the device layer."""
    global _Wrapper, _hooks, DEVICE, is_device, _unwrap_seq, _unwrap_kwargs, _rewrap
    _Wrapper, _hooks, DEVICE, is_device = wrapper, hooks, device, device_test
    _unwrap_seq, _unwrap_kwargs, _rewrap = walks


MISS = object()  # "not handled here": run the kernel the plain way
_LIST_OPEN, _LIST_CLOSE = object(), object()  # brackets of a nested list inside a key
_NEW, _VIEW, _SAME, _SEQ, _CONST = range(5)
# signature -> (template of the results, record) or None when the op must always run its kernel
_CACHE: dict[tuple, tuple[Any, RawOp] | None] = {}
_CACHE_LIMIT = 200_000  # distinct signatures kept (a bound, in case of ever-new arguments)
_KEY_VALUE_TYPES = (str, torch.dtype, torch.device, torch.layout, torch.memory_format)


_SIG_IDS: dict[tuple, int] = {}  # (shape, stride, storage offset, dtype) -> its number
_SIG_IDS_LIMIT = 1_000_000
_sig_numbers = itertools.count()  # never reused: a number always means one signature


def _sig_id(t: torch.Tensor) -> int:
    """The number of a meta tensor's metadata signature (small ints hash and compare fast)."""
    sig = (t.shape, t.stride(), t.storage_offset(), t.dtype)
    number = _SIG_IDS.get(sig)
    if number is None:
        if len(_SIG_IDS) >= _SIG_IDS_LIMIT:
            _SIG_IDS.clear()
        number = _SIG_IDS.setdefault(sig, next(_sig_numbers))
    return number


def _meta_key(values: Any, parts: list, wrappers: list, info: Any, floats: bool) -> bool:
    """Append the signature of ``values`` (device meta tensors by metadata, the rest by type and
    value; floats by type only unless ``floats``) to ``parts`` and the device tensors to
    ``wrappers``; False if it has no such signature (host tensors, real tensors, symbolic sizes,
    storages...)."""
    for v in values:
        cls = type(v)
        if cls is _Wrapper:
            sig = v._msig
            if sig is None:
                t = v._inner
                if not t.is_meta:
                    return False
                sig = v._msig = _sig_id(t)
            wrappers.append(v)
            parts.append(sig)
        elif cls is int or cls is bool:
            parts.append(cls)
            parts.append(v)
        elif cls is float:
            parts.append(cls)
            if floats:
                parts.append(v)
        elif cls is list or cls is tuple:
            parts.append(_LIST_OPEN)
            if not _meta_key(v, parts, wrappers, info, info.list_float_values):
                return False
            parts.append(_LIST_CLOSE)
        elif v is None or cls in _KEY_VALUE_TYPES:
            parts.append(v)
        else:
            return False
    return True


def forget_signatures(args: Any, kwargs: dict) -> None:
    for v in (*args, *kwargs.values()):
        if isinstance(v, _Wrapper):
            v._msig = None
        elif type(v) in (list, tuple):
            forget_signatures(v, {})


def run_cached(func: Any, info: Any, args: tuple, kwargs: dict) -> Any:
    parts: list = [info]
    wrappers: list[Any] = []
    floats = info.float_values
    if not _meta_key(args, parts, wrappers, info, floats):
        return MISS
    if kwargs:
        for k, v in kwargs.items():
            if k == "device" and v is not None:
                if not is_device(v):
                    return MISS  # results leave the device (the plain path names the copy)
                v = META
            parts.append(k)
            if not _meta_key((v,), parts, wrappers, info, floats):
                return MISS
    key = tuple(parts)
    entry = _CACHE.get(key)
    if entry is None:
        if key in _CACHE:
            return MISS  # known not to be rebuildable
        return _fill_meta_cache(func, info, args, kwargs, key, wrappers)
    template, raw = entry
    generic = _hooks._generic
    if generic is None:
        result = _build(template, wrappers, None)
        record = _hooks._record
        if record is not None:
            record(raw)
        return result
    outs: list = []
    result = _build(template, wrappers, outs)
    seen: dict[int, Any] = {}
    ins: list = []
    u_args = _unwrap_seq(args, seen, ins)
    u_kwargs = _unwrap_kwargs(kwargs, seen, ins) if kwargs else {}
    generic(info.name, func, tuple(u_args), u_kwargs, _inner_of(result, outs))
    return result


class _LazyStorage:
    """A new meta storage not made yet; made (``empty_strided``) when a tensor on it is needed,
    then bound to its ledger lease (so that tensors made on it the plain way find the lease)."""

    __slots__ = ("dtype", "lease", "shape", "stride", "tensor")

    def __init__(self, shape: torch.Size, stride: tuple, dtype: torch.dtype) -> None:
        self.shape, self.stride, self.dtype = shape, stride, dtype
        self.tensor: torch.Tensor | None = None
        self.lease: Any = None

    def get(self) -> torch.Tensor:
        with _MATERIALIZE_LOCK:
            if self.tensor is None:
                self.tensor = torch.empty_strided(self.shape, self.stride, dtype=self.dtype, device=META)
                if self.lease is not None:
                    self.lease.bind(_storage_id(self.tensor))
            return self.tensor

    def __copy__(self) -> _LazyStorage:  # copy.deepcopy of a device tensor's __dict__: one storage
        return self

    def __deepcopy__(self, memo: dict) -> _LazyStorage:
        return self


_MATERIALIZE_LOCK = threading.RLock()


def materialize(wrapper: Any, lazy: tuple) -> torch.Tensor:
    """Make the inner tensor of a lazy device tensor: ``lazy`` is (root, view) where root is a
    :class:`_LazyStorage` or a made tensor on the storage, view None (the root itself) or the
    (shape, stride, storage offset) to view it with."""
    root, view = lazy
    base = root if isinstance(root, torch.Tensor) else root.get()
    inner = base if view is None else base.as_strided(*view)
    wrapper._inner = inner
    wrapper.__dict__.pop("_lazy", None)
    return inner


def _root_of(wrapper: Any) -> Any:
    """What a lazy view of ``wrapper`` is made from: its inner tensor, or its lazy root."""
    d = wrapper.__dict__
    inner = d.get("_inner")
    if inner is not None:
        return inner
    return d["_lazy"][0]


def _build(template: tuple, wrappers: list, outs: list | None) -> Any:
    """The results described by ``template`` (see :func:`_template`), device tensors, from the
    op's device-tensor arguments ``wrappers``. New tensors and views are lazy: their meta inner
    tensor is made on first use of ``_inner`` (a step that hits the cache uses none). With
    ``outs`` (the general hook wants the inner results) they are made at once, into ``outs``."""
    kind = template[0]
    if kind == _NEW:  # (_NEW, shape, stride, dtype, storage bytes, signature number)
        shape, stride, dtype = template[1], template[2], template[3]
        wrapper = _make_wrapper(_Wrapper, shape, strides=stride, dtype=dtype, device=DEVICE)
        storage = _LazyStorage(shape, stride, dtype)
        wrapper._lazy = (storage, None)
        wrapper._msig = template[5]
        alloc_lazy = _hooks._alloc_lazy
        if alloc_lazy is not None:
            storage.lease = alloc_lazy(wrapper, template[4], None)
        elif _hooks._on_alloc is not None:
            _hooks._on_alloc(wrapper)
    elif kind == _SAME:  # (_SAME, argument index)
        wrapper = wrappers[template[1]]
    elif kind == _VIEW:  # (_VIEW, argument index, shape, stride, offset, dtype, signature number)
        shape, stride, offset = template[2], template[3], template[4]
        base = wrappers[template[1]]
        wrapper = _make_wrapper(
            _Wrapper, shape, strides=stride, storage_offset=offset, dtype=template[5], device=DEVICE
        )
        wrapper._lazy = (_root_of(base), (shape, stride, offset))
        wrapper._msig = template[6]
        alloc_lazy = _hooks._alloc_lazy
        if alloc_lazy is not None:
            alloc_lazy(wrapper, -1, base)
        elif _hooks._on_alloc is not None:
            _hooks._on_alloc(wrapper)
    elif kind == _SEQ:  # (_SEQ, list or tuple, templates)
        return template[1]([_build(t, wrappers, outs) for t in template[2]])
    else:  # (_CONST, value)
        return template[1]
    if outs is not None:
        outs.append(wrapper._inner)
    return wrapper


def _inner_of(result: Any, outs: list) -> Any:
    """The inner (unwrapped) form of a result built by :func:`_build`, in the same structure."""
    it = iter(outs)

    def walk(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return next(it)
        if type(x) in (list, tuple):
            return type(x)(walk(v) for v in x)
        return x

    return walk(result)


def _storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


# the address of a tensor's StorageImpl, without making a Python storage object
_storage_id = getattr(torch._C, "_storage_id", _storage_key)


def _snapshot(t: torch.Tensor) -> tuple:
    storage = t.untyped_storage()
    return (t.shape, t.stride(), t.storage_offset(), t.dtype, storage._cdata, storage.nbytes())


def _fill_meta_cache(func: Any, info: Any, args: tuple, kwargs: dict, key: tuple, wrappers: list) -> Any:
    """First call of a signature: run the kernel, answer as the plain path does, and keep a
    template of the results if they can be rebuilt from the inputs alone."""
    inners = [w._inner for w in wrappers]
    before = [_snapshot(t) for t in inners]
    seen: dict[int, Any] = {}
    ins: list = []
    u_args = _unwrap_seq(args, seen, ins)
    u_kwargs = _unwrap_kwargs(kwargs, seen, ins) if kwargs else {}
    out = info.call(*u_args, **u_kwargs)
    outs: list = []
    result = _rewrap(out, seen, outs)
    raw = raw_op(info.name, func, info.formula, ins, outs, u_args, u_kwargs, out)
    record = _hooks._record
    if record is not None:
        record(raw)
    elif _hooks._generic is not None:
        _hooks._generic(info.name, func, tuple(u_args), u_kwargs, out)

    template = None
    if [_snapshot(t) for t in inners] == before:
        template = _template(out, inners, {_storage_id(t) for t in inners}, set())
    else:  # an op that changes an input's metadata: always runs its kernel
        for w in wrappers:
            w._msig = None
    if len(_CACHE) >= _CACHE_LIMIT:
        _CACHE.clear()
    _CACHE[key] = None if template is None else (template, raw)
    return result


def _template(x: Any, inners: list, input_storages: set, new_storages: set) -> Any:
    """How to rebuild result ``x`` from the inputs, or None if it cannot be."""
    if isinstance(x, torch.Tensor):
        if type(x) is not torch.Tensor or not x.is_meta or x.layout is not _STRIDED or x.is_conj() or x.is_neg():
            return None
        for i in range(len(inners) - 1, -1, -1):  # the last one, as the plain path's ``seen`` has it
            if x is inners[i]:
                return (_SAME, i)
        storage = _storage_id(x)
        if storage in input_storages:  # a view of an input: of exactly one of them
            owners = [i for i, t in enumerate(inners) if _storage_id(t) == storage]
            if len({id(inners[i]) for i in owners}) != 1 or inners[owners[0]].dtype != x.dtype:
                return None
            return (_VIEW, owners[0], x.shape, x.stride(), x.storage_offset(), x.dtype, _sig_id(x))
        if storage in new_storages or x.storage_offset() != 0:
            return None
        fresh = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=META)
        nbytes = x.untyped_storage().nbytes()
        if fresh.untyped_storage().nbytes() != nbytes:
            return None
        new_storages.add(storage)
        return (_NEW, x.shape, x.stride(), x.dtype, nbytes, _sig_id(x))
    cls = type(x)
    if cls is list or cls is tuple:
        parts = [_template(v, inners, input_storages, new_storages) for v in x]
        return None if any(p is None for p in parts) else (_SEQ, cls, tuple(parts))
    if x is None or cls in (int, float, bool):
        return (_CONST, x)
    return None
