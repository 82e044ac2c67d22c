"""The emulated device as a native PyTorch backend: device ``xla``, no Python per op.

Tensors on ``xla:0`` are ordinary PyTorch tensors whose memory is host memory; every ATen op
on them reaches the C++ fallback of ``xla_backend.cpp``, which runs the CPU kernel on that
memory and records the op (name, tensor shapes and dtypes, and for the ops PyTorch counts FLOPs
of, the arguments) for the step graph. Autograd runs in C++ above it, so a backward node costs
what it costs on the CPU. ``mark_step`` takes the graph: a 128-bit key of its records and their
count, the records themselves only for a graph not seen before (docs/capture.md).

This is the device real-math work runs on. Model-scale work (meta tensors, no values) keeps the
Python device layer (:mod:`emulator.capture.tensor`, device ``lazy``), which rebuilds results
from per-signature templates instead of allocating. ``NEURON_EMULATOR_CAPTURE=python`` forces
the Python layer for everything; a machine where the backend cannot be compiled falls back to
it with one line on stderr.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch
from torch.utils.flop_counter import flop_registry

from emulator.capture.ops import OpRecord
from emulator.capture.recorder import count_flops, tensor_metas

DEVICE = torch.device("xla", 0)
_lock = threading.Lock()
_loaded: ModuleType | None = None
_failure: str | None = None


def wanted() -> bool:
    return os.environ.get("NEURON_EMULATOR_CAPTURE", "").strip().lower() != "python"


def backend() -> ModuleType | None:
    """The loaded extension, or None (not wanted, or it could not be built: said once)."""
    global _loaded, _failure
    if _loaded is not None or _failure is not None:
        return _loaded
    with _lock:
        if _loaded is None and _failure is None:
            if not wanted():
                _failure = "NEURON_EMULATOR_CAPTURE=python"
                return None
            from emulator.capture.native.build import failure_line, load

            try:
                module = load()
            except Exception as exc:  # no compiler, headers or ninja: the Python layer serves
                _failure = failure_line(exc)
                print(
                    f"neuron-emulator: native device backend unavailable ({_failure}); "
                    "using the Python device layer (slower per op)",
                    file=sys.stderr,
                )
                return None
            module.set_flop_ops(sorted(_flop_op_names()))
            module.catch_composites()
            _loaded = module
    return _loaded


def _flop_op_names() -> set[str]:
    names = set()
    for packet in flop_registry:
        name = getattr(packet, "_qualified_op_name", None)  # "aten::mm"; higher-order ops have none
        if name:
            names.add(name)
    return names


def is_device(t: torch.Tensor) -> bool:
    return t.device.type == DEVICE.type


class NativeGraph:
    """The ops recorded since the previous step: ``key`` identifies the graph (equal names,
    shapes and dtypes, and equal integer arguments of FLOP-counted ops, give an equal key);
    :meth:`ops` builds the cost model's records, once per new graph."""

    def __init__(self, module: ModuleType, key: tuple[int, int, int]) -> None:
        self._module = module
        self.key = key

    def __len__(self) -> int:
        return self.key[2]

    def ops(self) -> list[OpRecord]:
        return [_op_record(*raw) for raw in self._module.taken_records()]


def _op_record(name: str, ins: tuple, outs: tuple, op: tuple[str, str] | None, args: list, results: list) -> OpRecord:
    flops = 0
    if op is not None:
        func = _overload(*op)
        if func is not None:
            positional, keywords = _split_arguments(func, args)
            out = results[0] if len(results) == 1 else tuple(results)
            flops = count_flops(func, tuple(positional), keywords, out)
    return OpRecord(name, tensor_metas(ins), tensor_metas(outs), flops)


def _overload(qualified: str, overload: str) -> Any:
    namespace, _, op_name = qualified.partition("::")
    packet = getattr(getattr(torch.ops, namespace, None), op_name, None)
    return None if packet is None else getattr(packet, overload or "default", None)


def _split_arguments(func: Any, values: list) -> tuple[list, dict]:
    """Positional and keyword-only arguments, as the op's schema declares them."""
    positional, keywords = [], {}
    for argument, value in zip(func._schema.arguments, values, strict=False):
        if argument.kwarg_only:
            keywords[argument.name] = value
        else:
            positional.append(value)
    return positional, keywords


def take_graph() -> NativeGraph | None:
    module = _loaded
    return None if module is None else NativeGraph(module, tuple(module.take_graph()))


def pending_ops() -> int:
    """Ops recorded since the last :func:`take_graph` (0 without the backend)."""
    module = _loaded
    return 0 if module is None else int(module.pending_ops())


def host_view(t: torch.Tensor) -> torch.Tensor:
    """A host tensor over a device tensor's memory (writes go to the device tensor)."""
    module = backend()
    if module is None:
        raise RuntimeError("the native device backend is not loaded")
    return module.host_view(t)


# The parameters of the process (the ledger counts those on the device as ``constants``). They
# are read from the modules that own them, as they are at reading time: moving a module to the
# device replaces its Parameter objects without registering them again. The modules are found
# once by a scan of the live objects when recording starts, then through PyTorch's global
# parameter-registration hook (which names the module a parameter is registered on).
_modules: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
_watching = False


def _watch_parameters() -> None:
    global _watching
    if _watching:
        return
    _watching = True
    with warnings.catch_warnings():  # isinstance() on deprecated module attributes warns
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            if isinstance(obj, torch.nn.Module) and obj._parameters:
                _modules.add(obj)

    def registered(module: torch.nn.Module, name: str, param: torch.nn.Parameter | None) -> None:
        _modules.add(module)

    torch.nn.modules.module.register_module_parameter_registration_hook(registered)


def parameters() -> list[torch.Tensor]:
    """The parameters of the modules known (each once)."""
    seen: dict[int, torch.Tensor] = {}
    for module in list(_modules):
        for p in module._parameters.values():
            if p is not None:
                seen[id(p)] = p
    return list(seen.values())


def start(out_of_memory: Callable[[int], BaseException]) -> ModuleType | None:
    """Record device ops from now on; an allocation past the room the ledger gives the backend
    (``set_capacity``) raises ``out_of_memory(bytes)``. None: the backend is not available."""
    module = backend()
    if module is not None:
        _watch_parameters()
        module.set_out_of_memory(out_of_memory)
        # Backward on the calling thread, as for CPU tensors. Otherwise PyTorch's autograd engine
        # runs it on a thread of its own for the xla device, which drops its last reference to the
        # finished graph task (and the Python objects of its saved thread state) after the caller
        # has resumed: a script that ends right after backward() can be finalising Python then,
        # and the process aborts ("terminate called without an active exception"). The setting
        # is PyTorch's (torch.autograd.set_multithreading_enabled) and per thread.
        torch._C._set_multithreading_enabled(False)
        module.set_recording(True)
    return module
