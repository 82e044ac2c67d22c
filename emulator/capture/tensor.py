"""Tensors on the emulated device: a wrapper subclass around a real CPU (or meta) tensor.

``NeuronTensor`` reports device ``lazy:0`` (torch_xla is a lazy-tensor backend; PyTorch's CPU
build has a device guard for ``lazy``, so autograd works) and holds ``_inner``: a CPU tensor
with the real values for real-math work, or a ``meta`` tensor (shapes only) for model-scale
work. Every ATen op on such tensors goes through :meth:`NeuronTensor.__torch_dispatch__`, which
runs it on the inner tensors, hands an :class:`~emulator.capture.ops.OpRecord` to the active
:class:`Recorder`, and wraps the results.

:class:`DeviceMode` catches the ops that *create* device tensors from host ones: ``.to(device)``,
``torch.zeros(..., device=device)`` and friends.

Every op of a training step passes through here, so the per-op path is kept short:

- a :class:`Recorder` hook gets a ready record (FLOPs cached per distinct call) instead of the
  general ``on_op`` call that walks the arguments again;
- on meta tensors (model-scale work) an op's results are a function of its inputs' metadata
  (shape, stride, offset, dtype) and its other arguments: the first call of each distinct
  signature runs PyTorch's meta kernel and keeps a template of the results — new tensors, views
  of an input, the input itself (in-place ops) — with the op's record; later calls build the
  results from the template without running the kernel (most of PyTorch's meta kernels are
  Python reference implementations, tens to hundreds of microseconds each). Ops whose result
  cannot be rebuilt that way (they change an input's metadata, alias it ambiguously, return
  something else than tensors) always run their kernel. A result built from a template is
  *lazy*: its meta ``_inner`` tensor is made on first use (views share their base's storage
  then as they would have), and the ledger is told its size and base without it
  (``MemoryLedger.on_alloc_lazy``). A step whose every op hits the cache makes none.

``hooks.fast_path = False`` turns all of this off: every kernel runs and ``on_op`` is called the
general way — the reference the tests compare the fast path with.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from emulator.capture.recorder import RawOp, Recorder, flops_of, raw_op

DEVICE_TYPE = "lazy"
DEVICE = torch.device(DEVICE_TYPE, 0)
_HOST = torch.device("cpu")
_META = torch.device("meta")

# Called for every op on device tensors: (op name, func, args, kwargs, out) with inner (unwrapped)
# tensors. Host transfers are named "emulator.host_to_device" / "emulator.device_to_host".
OpHook = Callable[[str, Any, tuple, dict, Any], None]
HOST_TO_DEVICE = "emulator.host_to_device"
DEVICE_TO_HOST = "emulator.device_to_host"
# Called for every new device storage: (wrapper). Set by the runtime (memory ledger).
AllocHook = Callable[["NeuronTensor"], None]


class _Hooks:
    """Process-wide settings of the device layer (set by the runtime, read on every op)."""

    def __init__(self) -> None:
        self._on_op: OpHook | None = None
        self._fast_path = True
        # what the per-op path calls: a Recorder's ``record`` (fast) or the general hook
        self._record: Callable[[RawOp], None] | None = None
        self._generic: OpHook | None = None
        self._on_alloc: AllocHook | None = None
        # on_alloc for a device tensor whose meta inner tensor is not made yet, if the hook's
        # owner has one (MemoryLedger.on_alloc_lazy): (wrapper, nbytes, base wrapper or None)
        self._alloc_lazy: Callable[[NeuronTensor, int, NeuronTensor | None], Any] | None = None
        self.meta_mode: bool = False  # factories on the device make meta tensors (model-scale workload)
        # dtype a floating tensor takes when it lands on the device (XLA_USE_BF16 / XLA_DOWNCAST_BF16)
        self.downcast: dict[torch.dtype, torch.dtype] = {}

    @property
    def on_op(self) -> OpHook | None:
        return self._on_op

    @on_op.setter
    def on_op(self, hook: OpHook | None) -> None:
        self._on_op = hook
        self._route()

    @property
    def on_alloc(self) -> AllocHook | None:
        return self._on_alloc

    @on_alloc.setter
    def on_alloc(self, hook: AllocHook | None) -> None:
        self._on_alloc = hook
        # the hook's own method names its owner's method for lazy tensors (see _build)
        variant = getattr(getattr(hook, "__func__", None), "lazy_variant", None)
        self._alloc_lazy = getattr(getattr(hook, "__self__", None), variant) if variant else None

    @property
    def fast_path(self) -> bool:
        """Per-op caches and the Recorder shortcut (True); False: the plain reference path."""
        return self._fast_path

    @fast_path.setter
    def fast_path(self, on: bool) -> None:
        self._fast_path = bool(on)
        self._route()

    def _route(self) -> None:
        hook = self._on_op
        owner = getattr(hook, "__self__", None)
        recorder = (
            self._fast_path
            and isinstance(owner, Recorder)
            and getattr(hook, "__func__", None) is Recorder.on_op
        )
        self._record = owner.record if recorder and owner is not None else None
        self._generic = None if recorder else hook


hooks = _Hooks()


def is_device(dev: Any) -> bool:
    if dev is None:
        return False
    if isinstance(dev, str):
        return dev.split(":", 1)[0] == DEVICE_TYPE
    return isinstance(dev, torch.device) and dev.type == DEVICE_TYPE


_make_wrapper = torch.Tensor._make_wrapper_subclass
_STRIDED = torch.strided


class NeuronTensor(torch.Tensor):
    _inner: torch.Tensor
    # number of the (shape, stride, storage offset, dtype) of a meta ``_inner``, kept by the meta
    # fast path (see _meta_key); None until known. Ops that change ``_inner``'s metadata reset it.
    _msig: int | None = None
    # a lazy meta tensor's (root storage, view geometry or None) until ``_inner`` is made; only in
    # the instance's __dict__ (see __getattr__ and _build)
    _lazy: tuple[Any, tuple | None]

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> NeuronTensor:
        wrapper = _make_wrapper(
            cls,
            inner.shape,
            strides=inner.stride(),
            storage_offset=inner.storage_offset(),
            dtype=inner.dtype,
            layout=inner.layout,
            device=DEVICE,
            requires_grad=inner.requires_grad,
        )
        wrapper._inner = inner
        return wrapper

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails: ``_inner`` of a lazy meta tensor (see _build).
        if name == "_inner":
            lazy = self.__dict__.get("_lazy")
            if lazy is not None:
                return _materialize(self, lazy)
        raise AttributeError(name)

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]  # as Tensor.__repr__
        inner = self._inner
        if inner.is_meta:
            return f"tensor(..., device='{DEVICE}', size={tuple(inner.shape)}, dtype={inner.dtype})"
        body = repr(inner.detach())
        return body[:-1] + f", device='{DEVICE}')" if body.endswith(")") else body

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _run_on_device(func, args, kwargs or {})


def unwrap(x: Any) -> Any:
    return x._inner if isinstance(x, NeuronTensor) else x


def made_inner(x: torch.Tensor) -> torch.Tensor | None:
    """The inner tensor of a device tensor if it exists, None for a lazy meta tensor (one whose
    inner tensor is made on first use): a way to skip those without making them."""
    return x.__dict__.get("_inner")


def _host_device(x: Any) -> Any:
    """The device the inner tensors live on, in place of ``lazy``."""
    if is_device(x):
        return _META if hooks.meta_mode else _HOST
    return x


def _wrap(inner: torch.Tensor) -> NeuronTensor:
    """``NeuronTensor(inner)`` without the ``__new__`` indirection (the per-op path)."""
    if inner.layout is not _STRIDED:
        return NeuronTensor(inner)
    wrapper = _make_wrapper(
        NeuronTensor,
        inner.shape,
        strides=inner.stride(),
        storage_offset=inner.storage_offset(),
        dtype=inner.dtype,
        device=DEVICE,
        requires_grad=inner.requires_grad,
    )
    wrapper._inner = inner
    return wrapper


def wrap_new(out: torch.Tensor) -> NeuronTensor:
    wrapped = _wrap(out)
    on_alloc = hooks._on_alloc
    if on_alloc is not None:
        on_alloc(wrapped)
    return wrapped


# -- per-op facts, once per OpOverload ---------------------------------------------------------
class _OpInfo:
    __slots__ = ("call", "float_values", "formula", "func", "list_float_values", "mutates_meta", "name")

    def __init__(self, func: Any) -> None:
        self.func = func  # kept alive: _OPS is keyed by id(func) (OpOverload.__hash__ is Python)
        packet = getattr(func, "_overloadpacket", None)
        self.name = str(packet) if packet is not None else str(func)
        self.formula = flop_registry.get(packet) if packet is not None else None
        self.call = getattr(func, "_op", func)  # skips OpOverload.__call__'s Python frame
        schema = getattr(func, "_schema", None)
        tags = getattr(func, "tags", ())
        # ops that may change an input's metadata: in-place view ops, resizes, out= results
        self.mutates_meta = (
            schema is None
            or torch.Tag.inplace_view in tags
            or any(a.is_out for a in schema.arguments)
            or "resize" in self.name
            or self.name == "aten.set_"
        )
        # Whether the value of a float argument can change the results' metadata (so it belongs
        # in the meta signature) or only its type can (type promotion: int vs float). A float
        # Scalar such as AdamW's bias correction, new every step, changes no shape: so for ops
        # that return new tensors or write the values of their inputs. Kept where it can:
        # ``out=`` ops (``arange(..., out=t)`` resizes ``t``), ops that change their input's
        # metadata, ops with a FLOP formula (counted once per signature), and floats inside
        # lists (upsampling scale factors) except for the ``_foreach_*`` ops (per-tensor scalars).
        self.float_values = self.mutates_meta or self.formula is not None
        self.list_float_values = self.float_values or not self.name.startswith("aten._foreach_")


_OPS: dict[int, _OpInfo] = {}


def _op_info(func: Any) -> _OpInfo:
    info = _OPS.get(id(func))
    if info is None:
        info = _OPS[id(func)] = _OpInfo(func)
    return info


# ATen arguments are tensors, scalars, devices, or one level of list/tuple of them (cat, stack,
# _foreach_*); these flat walks replace the generic pytree, which costs more than small ops do.
def _unwrap_seq(values: Any, seen: dict[int, NeuronTensor], flat: list) -> list:
    """Inner tensors in place of device tensors; every tensor also goes to ``flat`` (in order)."""
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            if isinstance(v, NeuronTensor):
                seen[id(v._inner)] = v
                v = v._inner
            flat.append(v)
            out.append(v)
        elif type(v) in (list, tuple):
            out.append(type(v)(_unwrap_seq(v, seen, flat)))
        else:
            out.append(v)
    return out


def _unwrap_kwargs(kwargs: dict, seen: dict[int, NeuronTensor], flat: list) -> dict:
    u_kwargs = {}
    for k, v in kwargs.items():
        if isinstance(v, torch.Tensor):
            if isinstance(v, NeuronTensor):
                seen[id(v._inner)] = v
                v = v._inner
            flat.append(v)
            u_kwargs[k] = v
        elif type(v) in (list, tuple):
            u_kwargs[k] = type(v)(_unwrap_seq(v, seen, flat))
        else:
            u_kwargs[k] = _host_device(v)
    return u_kwargs


def _rewrap(x: Any, seen: dict[int, NeuronTensor], flat: list) -> Any:
    """Device tensors for the results (the argument itself for in-place/out= results); every
    result tensor also goes to ``flat`` (in order)."""
    if isinstance(x, torch.Tensor):
        flat.append(x)
        same = seen.get(id(x))
        return same if same is not None else wrap_new(x)
    if type(x) in (list, tuple):
        return type(x)(_rewrap(v, seen, flat) for v in x)
    return x


def _run_on_device(func: Any, args: tuple, kwargs: dict) -> Any:
    info = _OPS.get(id(func)) or _op_info(func)
    if hooks.meta_mode:
        if hooks._fast_path:
            done = _run_meta_cached(func, info, args, kwargs)
            if done is not _MISS:
                return done
        _forget_signatures(args, kwargs)  # the kernel may change their metadata (resize_, t_...)
    seen: dict[int, NeuronTensor] = {}
    ins: list = []
    u_args = []
    for v in args:  # _unwrap_seq, inline for the usual flat arguments
        cls = type(v)
        if cls is NeuronTensor:
            inner = v._inner
            seen[id(inner)] = v
            ins.append(inner)
            v = inner
        elif cls is list or cls is tuple or isinstance(v, torch.Tensor):
            v = _unwrap_seq((v,), seen, ins)[0]
        u_args.append(v)
    u_kwargs = _unwrap_kwargs(kwargs, seen, ins) if kwargs else {}
    out = info.call(*u_args, **u_kwargs)

    to_host = False
    if kwargs:
        target = kwargs.get("device")
        to_host = target is not None and not is_device(target)  # e.g. .cpu(): results leave the device
    outs: list = []
    out_sig: tuple[tuple[torch.Size, torch.dtype], ...] | None = None
    if to_host:
        result = out
        _sig_into(out, outs)
    elif type(out) is torch.Tensor:  # _rewrap and wrap_new, inline for the usual single result
        result = seen.get(id(out))
        if result is None and out.layout is _STRIDED:
            shape, dtype = out.shape, out.dtype
            out_sig = ((shape, dtype),)
            result = _make_wrapper(
                NeuronTensor,
                shape,
                strides=out.stride(),
                storage_offset=out.storage_offset(),
                dtype=dtype,
                device=DEVICE,
                requires_grad=out.requires_grad,
            )
            result._inner = out
            on_alloc = hooks._on_alloc
            if on_alloc is not None:
                on_alloc(result)
        elif result is None:
            result = wrap_new(out)
        outs.append(out)
    else:
        result = _rewrap(out, seen, outs)
    record = hooks._record
    if record is not None:
        name = DEVICE_TO_HOST if to_host else info.name
        formula = info.formula
        in_sig = tuple([(t.shape, t.dtype) for t in ins])
        if out_sig is None:
            out_sig = tuple([(t.shape, t.dtype) for t in outs])
        flops = 0 if formula is None else flops_of(func, formula, in_sig, out_sig, u_args, u_kwargs, out)
        record((name, in_sig, out_sig, flops))
    elif hooks._generic is not None:
        hooks._generic(DEVICE_TO_HOST if to_host else info.name, func, tuple(u_args), u_kwargs, out)
    return result


def _sig_into(x: Any, flat: list) -> None:
    if isinstance(x, torch.Tensor):
        flat.append(x)
    elif type(x) in (list, tuple):
        for v in x:
            _sig_into(v, flat)


# -- meta tensors: results rebuilt from a per-signature template -------------------------------
_MISS = object()  # "not handled here": run the kernel the plain way
_LIST_OPEN, _LIST_CLOSE = object(), object()  # brackets of a nested list inside a key
_NEW, _VIEW, _SAME, _SEQ, _CONST = range(5)
# signature -> (template of the results, record) or None when the op must always run its kernel
_META_CACHE: dict[tuple, tuple[Any, RawOp] | None] = {}
_META_CACHE_LIMIT = 200_000  # distinct signatures kept (a bound, in case of ever-new arguments)
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


def _meta_key(values: Any, parts: list, wrappers: list, info: _OpInfo, floats: bool) -> bool:
    """Append the signature of ``values`` (device meta tensors by metadata, the rest by type and
    value; floats by type only unless ``floats``) to ``parts`` and the device tensors to
    ``wrappers``; False if it has no such signature (host tensors, real tensors, symbolic sizes,
    storages...)."""
    for v in values:
        cls = type(v)
        if cls is NeuronTensor:
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


def _forget_signatures(args: Any, kwargs: dict) -> None:
    for v in (*args, *kwargs.values()):
        if isinstance(v, NeuronTensor):
            v._msig = None
        elif type(v) in (list, tuple):
            _forget_signatures(v, {})


def _run_meta_cached(func: Any, info: _OpInfo, args: tuple, kwargs: dict) -> Any:
    parts: list = [info]
    wrappers: list[NeuronTensor] = []
    floats = info.float_values
    if not _meta_key(args, parts, wrappers, info, floats):
        return _MISS
    if kwargs:
        for k, v in kwargs.items():
            if k == "device" and v is not None:
                if not is_device(v):
                    return _MISS  # results leave the device (the plain path names the copy)
                v = _META
            parts.append(k)
            if not _meta_key((v,), parts, wrappers, info, floats):
                return _MISS
    key = tuple(parts)
    entry = _META_CACHE.get(key)
    if entry is None:
        if key in _META_CACHE:
            return _MISS  # known not to be rebuildable
        return _fill_meta_cache(func, info, args, kwargs, key, wrappers)
    template, raw = entry
    generic = hooks._generic
    if generic is None:
        result = _build(template, wrappers, None)
        record = hooks._record
        if record is not None:
            record(raw)
        return result
    outs: list = []
    result = _build(template, wrappers, outs)
    seen: dict[int, NeuronTensor] = {}
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
                self.tensor = torch.empty_strided(self.shape, self.stride, dtype=self.dtype, device=_META)
                if self.lease is not None:
                    self.lease.bind(_storage_id(self.tensor))
            return self.tensor

    def __copy__(self) -> _LazyStorage:  # copy.deepcopy of a device tensor's __dict__: one storage
        return self

    def __deepcopy__(self, memo: dict) -> _LazyStorage:
        return self


_MATERIALIZE_LOCK = threading.RLock()


def _materialize(wrapper: NeuronTensor, lazy: tuple) -> torch.Tensor:
    """Make the inner tensor of a lazy device tensor: ``lazy`` is (root, view) where root is a
    :class:`_LazyStorage` or a made tensor on the storage, view None (the root itself) or the
    (shape, stride, storage offset) to view it with."""
    root, view = lazy
    base = root if isinstance(root, torch.Tensor) else root.get()
    inner = base if view is None else base.as_strided(*view)
    wrapper._inner = inner
    wrapper.__dict__.pop("_lazy", None)
    return inner


def _root_of(wrapper: NeuronTensor) -> Any:
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
        wrapper = _make_wrapper(NeuronTensor, shape, strides=stride, dtype=dtype, device=DEVICE)
        storage = _LazyStorage(shape, stride, dtype)
        wrapper._lazy = (storage, None)
        wrapper._msig = template[5]
        alloc_lazy = hooks._alloc_lazy
        if alloc_lazy is not None:
            storage.lease = alloc_lazy(wrapper, template[4], None)
        elif hooks._on_alloc is not None:
            hooks._on_alloc(wrapper)
    elif kind == _SAME:  # (_SAME, argument index)
        wrapper = wrappers[template[1]]
    elif kind == _VIEW:  # (_VIEW, argument index, shape, stride, offset, dtype, signature number)
        shape, stride, offset = template[2], template[3], template[4]
        base = wrappers[template[1]]
        wrapper = _make_wrapper(
            NeuronTensor, shape, strides=stride, storage_offset=offset, dtype=template[5], device=DEVICE
        )
        wrapper._lazy = (_root_of(base), (shape, stride, offset))
        wrapper._msig = template[6]
        alloc_lazy = hooks._alloc_lazy
        if alloc_lazy is not None:
            alloc_lazy(wrapper, -1, base)
        elif hooks._on_alloc is not None:
            hooks._on_alloc(wrapper)
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


def _fill_meta_cache(func: Any, info: _OpInfo, args: tuple, kwargs: dict, key: tuple, wrappers: list) -> Any:
    """First call of a signature: run the kernel, answer as the plain path does, and keep a
    template of the results if they can be rebuilt from the inputs alone."""
    inners = [w._inner for w in wrappers]
    before = [_snapshot(t) for t in inners]
    seen: dict[int, NeuronTensor] = {}
    ins: list = []
    u_args = _unwrap_seq(args, seen, ins)
    u_kwargs = _unwrap_kwargs(kwargs, seen, ins) if kwargs else {}
    out = info.call(*u_args, **u_kwargs)
    outs: list = []
    result = _rewrap(out, seen, outs)
    raw = raw_op(info.name, func, info.formula, ins, outs, u_args, u_kwargs, out)
    record = hooks._record
    if record is not None:
        record(raw)
    elif hooks._generic is not None:
        hooks._generic(info.name, func, tuple(u_args), u_kwargs, out)

    template = None
    if [_snapshot(t) for t in inners] == before:
        template = _template(out, inners, {_storage_id(t) for t in inners}, set())
    else:  # an op that changes an input's metadata: always runs its kernel
        for w in wrappers:
            w._msig = None
    if len(_META_CACHE) >= _META_CACHE_LIMIT:
        _META_CACHE.clear()
    _META_CACHE[key] = None if template is None else (template, raw)
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
        fresh = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=_META)
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


def _create_on_device(func: Any, args: tuple, kwargs: dict) -> Any:
    """A host op that asks for ``device=lazy``: run it on the host, wrap what it makes."""
    source = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if source is not None and source.is_meta:
        hooks.meta_mode = True  # a model-scale workload moves meta tensors to the device
    host_kwargs = dict(kwargs)
    host_kwargs["device"] = _META if hooks.meta_mode else _HOST
    out = func(*args, **host_kwargs)
    if hooks.downcast and isinstance(out, torch.Tensor) and out.dtype in hooks.downcast:
        out = out.to(hooks.downcast[out.dtype])
    result = _rewrap(out, {}, [])
    if hooks.on_op is not None:
        hooks.on_op(HOST_TO_DEVICE, func, args, host_kwargs, out)
    return result


class DeviceMode(TorchDispatchMode):
    """Runs device ops (on :class:`NeuronTensor`) and turns host tensors into device tensors
    where an op asks for ``device=lazy``. Inside this handler the mode is off, so the inner ops
    it runs are plain PyTorch; ops on other threads without the mode (autograd's workers) reach
    :meth:`NeuronTensor.__torch_dispatch__` instead, which does the same."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # TorchDispatchMode otherwise wraps __torch_dispatch__ in torch._disable_dynamo: two more
        # Python frames and eval-frame switches on every op. Nothing here runs under torch.compile.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if NeuronTensor in types:
            return _run_on_device(func, args, kwargs or {})
        kwargs = kwargs or {}
        if is_device(kwargs.get("device")):
            return _create_on_device(func, args, kwargs)
        return (_OPS.get(id(func)) or _op_info(func)).call(*args, **kwargs)  # a host op, as it is
