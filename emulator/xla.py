"""torch_xla-like API for training scripts: ``import emulator.xla as xm`` instead of
``import torch_xla.core.xla_model as xm``.

``xla_device()`` attaches the process to the emulated instance, claims its NeuronCores (see
:mod:`emulator.runtime.attach`) and returns the device ``xla:0`` (the native device backend,
:mod:`emulator.capture.native`; ``lazy:0``, the Python device layer, where that backend is not
available or torch_xla's BF16 switches are set): tensors and modules moved there do their real
work on the CPU while every op is captured; ``mark_step()`` executes the step graph on the
emulated NeuronCore. Model-scale work (meta tensors) uses :func:`model_scale_device`.
torch is imported only when a device is asked for, so ``import emulator.xla`` stays cheap.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from emulator.runtime.attach import attach, current_session
from emulator.runtime.errors import NeuronRuntimeError

if TYPE_CHECKING:
    import torch

    from emulator.runtime.executor import DeviceRuntime, StepResult

__all__ = [
    "NeuronRuntimeError",
    "active_runtime",
    "device_runtime",
    "get_local_ordinal",
    "get_ordinal",
    "is_master_ordinal",
    "last_step",
    "mark_step",
    "model_scale_device",
    "neuroncores",
    "optimizer_step",
    "rendezvous",
    "save",
    "xla_device",
    "xrt_world_size",
]

_lock = threading.Lock()
_runtime: DeviceRuntime | None = None
_runtime_pid: int | None = None
_python_layer_pid: int | None = None  # the process whose ops the Python device layer's mode sees


def _device_runtime() -> DeviceRuntime:
    global _runtime, _runtime_pid
    with _lock:
        if _runtime is not None and _runtime_pid == os.getpid():
            return _runtime
        from emulator.runtime.executor import DeviceRuntime

        session = attach()
        runtime = DeviceRuntime(session, os.environ)
        runtime.install()
        _runtime, _runtime_pid = runtime, os.getpid()
        if runtime.native is None:
            _use_python_layer()
        return runtime


def device_runtime() -> DeviceRuntime:
    """This process's emulated device: attached and started on first use."""
    return _device_runtime()


def active_runtime() -> DeviceRuntime | None:
    """This process's emulated device if it has been started, else None (nothing is attached)."""
    return _runtime if _runtime is not None and _runtime_pid == os.getpid() else None


def _use_python_layer() -> None:
    """Route host ops that ask for device ``lazy`` to the Python device layer (once)."""
    global _python_layer_pid
    if _python_layer_pid == os.getpid():
        return
    from torch.utils._python_dispatch import _push_mode

    from emulator.capture.tensor import DeviceMode

    _push_mode(DeviceMode())
    _python_layer_pid = os.getpid()


def xla_device(n: int | None = None, devkind: str | None = None) -> torch.device:
    """Attach to the emulated instance (once) and return the device tensors should live on.

    Raises :class:`NeuronRuntimeError` when the cores cannot be claimed or no daemon runs.
    """
    runtime = _device_runtime()
    if runtime.native is not None:
        from emulator.capture.native import DEVICE as NATIVE_DEVICE

        return NATIVE_DEVICE
    from emulator.capture.tensor import DEVICE

    return DEVICE


def model_scale_device() -> torch.device:
    """The device for model-scale work (meta tensors: shapes, no values): the Python device
    layer's ``lazy:0``, which never allocates the tensors it counts (docs/capture.md)."""
    from emulator.capture.tensor import DEVICE

    _device_runtime()
    with _lock:
        _use_python_layer()
    return DEVICE


def mark_step(wait: bool = True) -> None:
    """Execute the ops recorded since the last step on the NeuronCore and wait for it."""
    if _runtime is not None and _runtime_pid == os.getpid():
        _runtime.mark_step()


def optimizer_step(optimizer: Any, barrier: bool = False, optimizer_args: dict | None = None) -> Any:
    """All-reduce gradients across ranks (data parallel), step the optimizer, end the step.

    The step graph always ends here (torch_xla does that with ``barrier=True`` or through its
    parallel loader), so a plain loop of forward, backward, ``optimizer_step`` is one graph per step.
    """
    runtime = _device_runtime()
    runtime.all_reduce_gradients(optimizer)
    loss = optimizer.step(**(optimizer_args or {}))
    mark_step()
    return loss


def last_step() -> StepResult | None:
    """What the last mark_step() executed (simulated device time, FLOPs, compile, outcome)."""
    return _runtime.last if _runtime is not None and _runtime_pid == os.getpid() else None


def neuroncores() -> tuple[int, ...]:
    """Global ids of the NeuronCores this process owns (empty before :func:`xla_device`)."""
    session = current_session()
    return session.neuroncores if session else ()


def save(obj: Any, path: str, master_only: bool = True, global_master: bool = False) -> None:
    """``torch.save`` with device tensors moved to the host (by the master ordinal only)."""
    import torch
    from torch.utils._pytree import tree_map

    if master_only and not is_master_ordinal(local=not global_master):
        return
    host = tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, obj)
    torch.save(host, path)


def rendezvous(tag: str) -> None:
    """Wait for every rank (a barrier when torch.distributed is initialised)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip().isdigit() else default


def get_ordinal() -> int:
    """Global rank of this process (``RANK`` under torchrun, else 0)."""
    return _env_int("RANK", 0)


def get_local_ordinal() -> int:
    return _env_int("LOCAL_RANK", 0)


def xrt_world_size() -> int:
    """Number of processes in the job (``WORLD_SIZE`` under torchrun, else 1)."""
    return _env_int("WORLD_SIZE", 1)


def is_master_ordinal(local: bool = True) -> bool:
    return (get_local_ordinal() if local else get_ordinal()) == 0
