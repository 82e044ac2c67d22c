"""Tensors on the emulated device: a wrapper subclass around a real CPU (or meta) tensor.

``NeuronTensor`` reports device ``lazy:0`` (torch_xla is a lazy-tensor backend; PyTorch's CPU
build has a device guard for ``lazy``, so autograd works) and holds ``_inner``: a CPU tensor
with the real values for real-math work, or a ``meta`` tensor (shapes only) for model-scale
work. Every ATen op on such tensors goes through :meth:`NeuronTensor.__torch_dispatch__`, which
runs it on the inner tensors, hands an :class:`~emulator.capture.ops.OpRecord` to the active
:class:`Recorder`, and wraps the results.

:class:`DeviceMode` catches the ops that *create* device tensors from host ones: ``.to(device)``,
``torch.zeros(..., device=device)`` and friends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

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
    on_op: OpHook | None = None
    on_alloc: AllocHook | None = None
    meta_mode: bool = False  # factories on the device make meta tensors (model-scale workload)
    # dtype a floating tensor takes when it lands on the device (XLA_USE_BF16 / XLA_DOWNCAST_BF16)
    downcast: dict[torch.dtype, torch.dtype] = {}  # noqa: RUF012 - one process-wide setting


hooks = _Hooks()


def is_device(dev: Any) -> bool:
    if dev is None:
        return False
    if isinstance(dev, str):
        return dev.split(":", 1)[0] == DEVICE_TYPE
    return isinstance(dev, torch.device) and dev.type == DEVICE_TYPE


class NeuronTensor(torch.Tensor):
    _inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> NeuronTensor:
        wrapper = torch.Tensor._make_wrapper_subclass(
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

    def __repr__(self, *, tensor_contents: Any = None) -> str:
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


def _host_device(x: Any) -> Any:
    """The device the inner tensors live on, in place of ``lazy``."""
    if is_device(x):
        return _META if hooks.meta_mode else _HOST
    return x


def wrap_new(out: torch.Tensor) -> NeuronTensor:
    wrapped = NeuronTensor(out)
    if hooks.on_alloc is not None:
        hooks.on_alloc(wrapped)
    return wrapped


# ATen arguments are tensors, scalars, devices, or one level of list/tuple of them (cat, stack,
# _foreach_*); these flat walks replace the generic pytree, which costs more than small ops do.
def _unwrap_seq(values: Any, seen: dict[int, NeuronTensor]) -> Any:
    out = []
    for v in values:
        if isinstance(v, NeuronTensor):
            seen[id(v._inner)] = v
            out.append(v._inner)
        elif type(v) in (list, tuple):
            out.append(type(v)(_unwrap_seq(v, seen)))
        else:
            out.append(v)
    return out


def _rewrap(x: Any, seen: dict[int, NeuronTensor]) -> Any:
    if isinstance(x, torch.Tensor):
        same = seen.get(id(x))
        return same if same is not None else wrap_new(x)  # in-place/out=: the argument itself
    if type(x) in (list, tuple):
        return type(x)(_rewrap(v, seen) for v in x)
    return x


def _run_on_device(func: Any, args: tuple, kwargs: dict) -> Any:
    seen: dict[int, NeuronTensor] = {}
    u_args = tuple(_unwrap_seq(args, seen))
    u_kwargs = {}
    for k, v in kwargs.items():
        if isinstance(v, NeuronTensor):
            seen[id(v._inner)] = v
            u_kwargs[k] = v._inner
        elif type(v) in (list, tuple):
            u_kwargs[k] = type(v)(_unwrap_seq(v, seen))
        else:
            u_kwargs[k] = _host_device(v)
    out = func(*u_args, **u_kwargs)

    target = kwargs.get("device")
    to_host = target is not None and not is_device(target)  # e.g. .cpu(): results leave the device
    result = out if to_host else _rewrap(out, seen)
    if hooks.on_op is not None:
        hooks.on_op(DEVICE_TO_HOST if to_host else str(func._overloadpacket), func, u_args, u_kwargs, out)
    return result


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
    result = _rewrap(out, {})
    if hooks.on_op is not None:
        hooks.on_op(HOST_TO_DEVICE, func, args, host_kwargs, out)
    return result


class DeviceMode(TorchDispatchMode):
    """Runs device ops (on :class:`NeuronTensor`) and turns host tensors into device tensors
    where an op asks for ``device=lazy``. Inside this handler the mode is off, so the inner ops
    it runs are plain PyTorch; ops on other threads without the mode (autograd's workers) reach
    :meth:`NeuronTensor.__torch_dispatch__` instead, which does the same."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if NeuronTensor in types:
            return _run_on_device(func, args, kwargs)
        if is_device(kwargs.get("device")):
            return _create_on_device(func, args, kwargs)
        return func(*args, **kwargs)
