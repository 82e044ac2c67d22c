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
- on meta tensors (model-scale work) the results of an op are rebuilt from a template kept per
  distinct signature, without running PyTorch's meta kernel again (:mod:`emulator.capture.meta_cache`).

``hooks.fast_path = False`` turns all of this off: every kernel runs and ``on_op`` is called the
general way — the reference the tests compare the fast path with.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from emulator.capture import meta_cache
from emulator.capture.meta_cache import META as _META
from emulator.capture.meta_cache import MISS, forget_signatures, materialize, run_cached
from emulator.capture.recorder import RawOp, Recorder, flops_of

DEVICE_TYPE = "lazy"
DEVICE = torch.device(DEVICE_TYPE, 0)
_HOST = torch.device("cpu")

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
        # the hook's own method names its owner's method for lazy tensors (see meta_cache._build)
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
    # fast path (see meta_cache._meta_key); None until known. Ops that change ``_inner``'s metadata reset it.
    _msig: int | None = None
    # a lazy meta tensor's (root storage, view geometry or None) until ``_inner`` is made; only in
    # the instance's __dict__ (see __getattr__ and meta_cache._build)
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
        # Only called when normal lookup fails: ``_inner`` of a lazy meta tensor (see meta_cache._build).
        if name == "_inner":
            lazy = self.__dict__.get("_lazy")
            if lazy is not None:
                return materialize(self, lazy)
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
            done = run_cached(func, info, args, kwargs)
            if done is not MISS:
                return done
        forget_signatures(args, kwargs)  # the kernel may change their metadata (resize_, t_...)
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
    if hooks._record is not None or hooks._generic is not None:
        _tell(func, info, DEVICE_TO_HOST if to_host else info.name, (ins, outs, out_sig), u_args, u_kwargs, out)
    return result


def _tell(func: Any, info: _OpInfo, name: str, tensors: tuple, u_args: list, u_kwargs: dict, out: Any) -> None:
    """Hand the op to the hook: a Recorder's ready record, or the general call. ``tensors``: the
    inner inputs, the inner results and the results' signature if known already (else None)."""
    record = hooks._record
    if record is not None:
        ins, outs, out_sig = tensors
        formula = info.formula
        in_sig = tuple([(t.shape, t.dtype) for t in ins])
        if out_sig is None:
            out_sig = tuple([(t.shape, t.dtype) for t in outs])
        flops = 0 if formula is None else flops_of(func, formula, in_sig, out_sig, u_args, u_kwargs, out)
        record((name, in_sig, out_sig, flops))
    elif hooks._generic is not None:
        hooks._generic(name, func, tuple(u_args), u_kwargs, out)


def _sig_into(x: Any, flat: list) -> None:
    if isinstance(x, torch.Tensor):
        flat.append(x)
    elif type(x) in (list, tuple):
        for v in x:
            _sig_into(v, flat)


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


meta_cache.bind(NeuronTensor, hooks, DEVICE, is_device, (_unwrap_seq, _unwrap_kwargs, _rewrap))
