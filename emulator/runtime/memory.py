"""HBM ledger of one process: the device bytes it really holds, by category, capped per core.

Bytes are counted per *storage* (views share their base's storage, so they cost nothing), from
the tensors that live on the emulated device: real CPU tensors for real-math work, meta tensors
(shapes only) for model-scale work. A storage is freed when its last device tensor is garbage
collected. Categories follow neuron-monitor (spec/neuron-tools.md §3.4):

- ``constants``: parameters (``nn.Parameter`` on the device), found at each :meth:`usage` call;
- ``tensors``: everything else — inputs, activations, gradients, optimizer state;
- ``model_code``: NEFF code of loaded models + the runtime's per-core micro-code overhead;
- ``runtime_memory``: the runtime's own device memory;
- ``model_shared_scratchpad``: 0 — intermediate values are real tensors here, counted under
  ``tensors``, so nothing is double-counted.

An allocation that would take a core past its capacity raises the runtime's out-of-memory error
(``NRT_RESOURCE``, status 4) in the allocating process; nothing is allocated.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import torch

from emulator.runtime.errors import NeuronRuntimeError

NRT_RESOURCE_STATUS = 4


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
        return {
            "constants": self.constants,
            "model_code": self.model_code,
            "model_shared_scratchpad": self.model_shared_scratchpad,
            "runtime_memory": self.runtime_memory,
            "tensors": self.tensors,
        }


class MemoryLedger:
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
        # re-entrant: a garbage collection inside a locked section may run _release finalizers
        self._lock = threading.RLock()
        self._storages: dict[int, list[int]] = {}  # storage key -> [nbytes, live wrappers]
        self._refs: dict[int, weakref.ref] = {}  # id(wrapper) -> weak reference (live wrappers)
        self._allocated = 0
        self.model_code = 0  # NEFF code of loaded models
        self.peak = 0

    # -- allocation --------------------------------------------------------------------------
    def fixed_bytes(self) -> int:
        return self.model_code + self.code_overhead + self.runtime_memory

    def on_alloc(self, wrapper: torch.Tensor) -> None:
        storage = wrapper._inner.untyped_storage()  # type: ignore[attr-defined]
        key = storage._cdata
        with self._lock:
            entry = self._storages.get(key)
            if entry is None:
                nbytes = storage.nbytes()
                used = self._allocated + self.code_overhead + self.model_code + self.runtime_memory
                if used + nbytes > self.capacity:
                    raise self._out_of_memory(nbytes, "tensors")
                entry = self._storages[key] = [nbytes, 0]
                self._allocated += nbytes
                if used + nbytes > self.peak:
                    self.peak = used + nbytes
            entry[1] += 1
            wid = id(wrapper)
            self._refs[wid] = weakref.ref(wrapper, lambda _, k=key, w=wid: self._release(k, w))

    def _release(self, key: int, wid: int) -> None:
        with self._lock:
            self._refs.pop(wid, None)
            entry = self._storages.get(key)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] <= 0:
                del self._storages[key]
                self._allocated -= entry[0]

    def load_code(self, nbytes: int) -> None:
        """Reserve a loaded model's code; fails like a tensor allocation when the core is full."""
        with self._lock:
            used = self._allocated + self.fixed_bytes()
            if used + nbytes > self.capacity:
                raise self._out_of_memory(nbytes, "model code")
            self.model_code += nbytes
            self.peak = max(self.peak, used + nbytes)

    # -- reading -----------------------------------------------------------------------------
    def usage(self) -> CoreUsage:
        with self._lock:
            wrappers = [w for w in (r() for r in list(self._refs.values())) if w is not None]
            param_keys = {
                w._inner.untyped_storage()._cdata  # type: ignore[attr-defined]
                for w in wrappers
                if getattr(w, "_is_param", False) or isinstance(w, torch.nn.Parameter)
            }
            constants = sum(self._storages.get(k, (0, 0))[0] for k in param_keys)
            return CoreUsage(
                constants=constants,
                model_code=self.model_code + self.code_overhead,
                model_shared_scratchpad=0,
                runtime_memory=self.runtime_memory,
                tensors=self._allocated - constants,
            )

    def live_wrappers(self) -> list[torch.Tensor]:
        with self._lock:
            refs = list(self._refs.values())
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
