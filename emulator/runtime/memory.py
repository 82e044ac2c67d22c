"""HBM ledger of one process: the device bytes it really holds, by category, capped per core.

Bytes are counted per *storage* (views share their base's storage, so they cost nothing), from
the tensors that live on the emulated device: real CPU tensors for real-math work, meta tensors
(shapes only) for model-scale work. A storage is freed when its last device tensor is garbage
collected. Categories follow neuron-monitor (docs/reference/neuron-monitor.md §memory_used):

- ``constants``: parameters (``nn.Parameter`` on the device), found at each :meth:`usage` call;
- ``tensors``: everything else — inputs, activations, gradients, optimizer state;
- ``model_code``: NEFF code of loaded models + the runtime's per-core micro-code overhead;
- ``runtime_memory``: the runtime's own device memory;
- ``model_shared_scratchpad``: 0 — intermediate values are real tensors here, counted under
  ``tensors``, so nothing is double-counted.

An allocation that would take a core past its capacity raises the runtime's out-of-memory error
(``NRT_RESOURCE``, status 4) in the allocating process; nothing is allocated.

Two device layers allocate: the Python one (model-scale work; a lease per storage, below) and
the native backend (real-math work, :mod:`emulator.capture.native`), which counts its storages
in C++ and checks them against the room this ledger leaves it (:meth:`use_native`). Its
parameters are the ``nn.Parameter`` objects on device ``xla`` the native layer knows of.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType

import torch

from emulator.runtime.errors import NeuronRuntimeError
from neurontools.contract.names import CORE_MEMORY_KEYS

NRT_RESOURCE_STATUS = 4


def _storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


# The address of a tensor's StorageImpl: the identity of its storage. torch._C._storage_id gives
# it without making a Python storage object (a few microseconds each, on every device tensor).
_storage_id = getattr(torch._C, "_storage_id", _storage_key)


def format_bytes(n: float) -> str:
    """The runtime's log format: ``172.000MB``, ``15.855GB``, ``1.062KB`` (binary multiples)."""
    for unit, size in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.3f}{unit}"
    return f"{n:.3f}B"


@dataclass(frozen=True)
class CoreUsage:
    constants: int
    model_code: int
    model_shared_scratchpad: int
    runtime_memory: int
    tensors: int

    @property
    def total(self) -> int:
        return self.constants + self.model_code + self.model_shared_scratchpad + self.runtime_memory + self.tensors

    def to_dict(self) -> dict[str, int]:
        """By category, in the report's key order (``report.names.CORE_MEMORY_KEYS``)."""
        return {key: getattr(self, key) for key in CORE_MEMORY_KEYS}


class _Lease:
    """A storage's bytes on the ledger, held by every device tensor of that storage (as an
    attribute): when the last of them is collected, the lease goes and gives the bytes back.
    ``key`` (the storage's address) is None while the storage is not made yet (a meta tensor
    the device layer creates lazily, see :meth:`MemoryLedger.on_alloc_lazy`)."""

    __slots__ = ("__weakref__", "key", "nbytes", "pending", "registry")

    def __init__(self, key: int | None, nbytes: int, pending: list, registry: dict) -> None:
        self.key = key
        self.nbytes = nbytes
        self.pending = pending
        self.registry = registry

    def bind(self, key: int) -> None:
        """The storage now exists at ``key``: tensors made on it find this lease."""
        self.key = key
        self.registry[key] = weakref.ref(self)

    def __del__(self) -> None:
        # No lock here (this runs wherever the last tensor happens to go, a garbage collection
        # inside a locked section included): list.append is atomic, the ledger settles it later.
        self.pending.append((self.key, self.nbytes))

    def __copy__(self) -> _Lease:  # a copied tensor (copy.deepcopy of its __dict__) shares it
        return self

    def __deepcopy__(self, memo: dict) -> _Lease:
        return self


class MemoryLedger:
    """Device bytes of one core. Per device tensor: one attribute (its storage's lease) and one
    weak reference, no lock and no callback; per storage: a lease, made under the lock, and
    its release queued when the lease goes — settled (under the lock) before the next
    allocation is checked against the capacity and before any reading."""

    def __init__(
        self,
        *,
        core: int,
        device: int,
        local_core: int,
        capacity: int,
        runtime_memory: int,
        code_overhead: int,
    ) -> None:
        self.core = core
        self.device = device
        self.local_core = local_core
        self.capacity = capacity
        self.runtime_memory = runtime_memory
        self.code_overhead = code_overhead
        self._lock = threading.RLock()
        # storage key -> weak reference to its lease (live storages); a device tensor holds its
        # storage's lease under the attribute ``self._attr``
        self._leases: dict[int, weakref.ref[_Lease]] = {}
        self._attr = f"_ledger_lease_{id(self)}"
        self._freed: list[tuple[int | None, int]] = []  # (storage key, bytes) of leases gone, unsettled
        # weak references to the device tensors, for live_wrappers(); dead ones pruned now and then
        self._wrappers: list[weakref.ref] = []
        self._prune_at = 1024
        self._allocated_bytes = 0  # as of the last settling
        self.model_code = 0  # NEFF code of loaded models
        self._peak = 0
        # the native device backend's counters and its live parameters, when it is in use
        self._native: ModuleType | None = None
        self._native_params: Callable[[], Iterable[torch.Tensor]] = tuple

    def use_native(self, module: ModuleType, parameters: Callable[[], Iterable[torch.Tensor]]) -> None:
        """Count the native backend's storages too; give it the room left on the core."""
        self._native = module
        self._native_params = parameters
        self._native_room()

    def _native_room(self) -> None:
        if self._native is not None:
            self._native.set_capacity(self.capacity - self.fixed_bytes() - self._python_allocated())

    @property
    def peak(self) -> int:
        """Most bytes held at once (the native storages' peak plus what is fixed on the core)."""
        if self._native is None:
            return self._peak
        return max(self._peak, self._native.peak_bytes() + self.fixed_bytes())

    @peak.setter
    def peak(self, value: int) -> None:
        self._peak = value

    # -- allocation --------------------------------------------------------------------------
    def fixed_bytes(self) -> int:
        return self.model_code + self.code_overhead + self.runtime_memory

    def _python_allocated(self) -> int:
        with self._lock:
            self._settle()
            return self._allocated_bytes

    @property
    def _allocated(self) -> int:
        """Bytes of the live storages."""
        native = self._native.live_bytes() if self._native is not None else 0
        return self._python_allocated() + native

    def on_alloc(self, wrapper: torch.Tensor) -> None:
        inner = wrapper._inner  # type: ignore[attr-defined]  # a device tensor (capture.tensor.NeuronTensor)
        key = _storage_id(inner)
        ref = self._leases.get(key)
        lease = None if ref is None else ref()
        if lease is None:  # a storage new to the ledger (or to be counted again)
            lease = self._new_lease(key, inner.untyped_storage().nbytes())
        # _hold, inline (this runs for every device tensor)
        setattr(wrapper, self._attr, lease)
        wrappers = self._wrappers
        wrappers.append(weakref.ref(wrapper))
        if len(wrappers) >= self._prune_at:
            self._prune()

    def on_alloc_lazy(self, wrapper: torch.Tensor, nbytes: int, base: torch.Tensor | None) -> _Lease | None:
        """:meth:`on_alloc` for a device tensor whose inner (meta) tensor is not made yet: a new
        storage of ``nbytes`` (``base`` None; the lease is returned, to be bound to the storage's
        address when it is made) or a view of device tensor ``base``'s storage."""
        lease: _Lease | None
        if base is None:
            lease = self._new_lease(None, nbytes)
        else:
            lease = getattr(base, self._attr, None)
            if lease is None:  # a base this ledger has not seen: look its storage up
                self.on_alloc(wrapper)
                return None
        self._hold(wrapper, lease)
        return lease

    # the device layer calls on_alloc_lazy instead where it can (see emulator.capture.tensor)
    on_alloc.lazy_variant = "on_alloc_lazy"  # type: ignore[attr-defined]  # a marker set on the function

    def _new_lease(self, key: int | None, nbytes: int) -> _Lease:
        with self._lock:
            if key is not None:  # (another thread may have been first)
                ref = self._leases.get(key)
                lease = ref() if ref is not None else None
                if lease is not None:
                    return lease
            if self._freed:
                self._settle()
            native = self._native.live_bytes() if self._native is not None else 0
            used = self._allocated_bytes + native + self.code_overhead + self.model_code + self.runtime_memory
            if used + nbytes > self.capacity:
                raise self._out_of_memory(nbytes, "tensors")
            lease = _Lease(key, nbytes, self._freed, self._leases)
            if key is not None:
                self._leases[key] = weakref.ref(lease)
            self._allocated_bytes += nbytes
            if used + nbytes > self._peak:
                self._peak = used + nbytes
            return lease

    def _hold(self, wrapper: torch.Tensor, lease: _Lease) -> None:
        # No lock needed: the lease is held (by the caller, then by the tensor), list.append is
        # atomic, and _prune() only rewrites the part of the list that existed when it started.
        setattr(wrapper, self._attr, lease)
        wrappers = self._wrappers
        wrappers.append(weakref.ref(wrapper))
        if len(wrappers) >= self._prune_at:
            self._prune()

    def _settle(self) -> None:
        """Give back the bytes of the leases gone (with the lock held)."""
        freed, leases = self._freed, self._leases
        while freed:
            key, nbytes = freed.pop()
            self._allocated_bytes -= nbytes
            if key is not None:
                ref = leases.get(key)
                if ref is not None and ref() is None:  # not a newer storage at that address
                    del leases[key]

    def _prune(self) -> None:
        with self._lock:
            wrappers = self._wrappers
            n = len(wrappers)
            live = [r for r in wrappers[:n] if r() is not None]
            wrappers[:n] = live
            self._prune_at = max(1024, 2 * len(live))

    def load_code(self, nbytes: int) -> None:
        """Reserve a loaded model's code; fails like a tensor allocation when the core is full."""
        with self._lock:
            used = self._allocated + self.fixed_bytes()
            if used + nbytes > self.capacity:
                raise self._out_of_memory(nbytes, "model code")
            self.model_code += nbytes
            self._peak = max(self._peak, used + nbytes)
            self._native_room()

    # -- reading -----------------------------------------------------------------------------
    def usage(self) -> CoreUsage:
        with self._lock:
            attr = self._attr
            param_leases = {  # a storage's bytes once, however many parameters view it
                id(lease): lease.nbytes
                for w in self.live_wrappers()
                if (getattr(w, "_is_param", False) or isinstance(w, torch.nn.Parameter))
                and (lease := getattr(w, attr, None)) is not None
            }
            constants = sum(param_leases.values()) + self._native_parameter_bytes()
            return CoreUsage(
                constants=constants,
                model_code=self.model_code + self.code_overhead,
                model_shared_scratchpad=0,
                runtime_memory=self.runtime_memory,
                tensors=self._allocated - constants,
            )

    def _native_parameter_bytes(self) -> int:
        """Bytes of the native device storages that parameters live on (each storage once)."""
        storages: dict[int, int] = {}
        for p in self._native_params():
            if p.device.type == "xla":
                storage = p.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
        return sum(storages.values())

    def out_of_memory(self, nbytes: int) -> NeuronRuntimeError:
        """The error of a tensor allocation that does not fit (the native backend raises it)."""
        return self._out_of_memory(nbytes, "tensors")

    def live_wrappers(self) -> list[torch.Tensor]:
        refs = self._wrappers[:]
        return [w for w in (r() for r in refs) if w is not None]

    def _out_of_memory(self, nbytes: int, usage: str) -> NeuronRuntimeError:
        tensors = self._allocated
        total = tensors + self.fixed_bytes()
        where = f"ND {self.device}:NC {self.local_core}"
        table = "\n".join(
            [
                f"Memory usage on {where} (NeuronCore {self.core}), capacity {format_bytes(self.capacity)}:",
                f"  * total: {format_bytes(total)}",
                f"  * tensors and constants: {format_bytes(tensors)}",
                f"  * model code: {format_bytes(self.model_code + self.code_overhead)}",
                f"  * runtime: {format_bytes(self.runtime_memory)}",
            ]
        )
        return NeuronRuntimeError(
            "NRT_RESOURCE",
            f"Failed to allocate {format_bytes(nbytes)} (alignment: none, usage: {usage}) on {where}: "
            f'nrt_tensor_allocate status={NRT_RESOURCE_STATUS} message="Allocation Failure"\n{table}',
        )
