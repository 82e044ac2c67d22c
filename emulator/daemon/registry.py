"""Device truth about processes: who has the devices open and which NeuronCores each one owns.

Thread-safe; every public method takes the lock. Liveness is checked against the real host
(``psutil``): a process that exits or is killed, even with SIGKILL, is released by :meth:`reap`,
which the daemon calls several times a second. A PID is identified together with its start time,
so a recycled PID is never mistaken for the process that held the cores.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from emulator.runtime.core_spec import format_core_ids
from neurontools.contract.inventory import NOT_A_RUNTIME, RUNTIME, Inventory, NeuronProcess, PodRef


class ClaimError(Exception):
    """An attach request the runtime would refuse. ``http_status`` and ``nrt_status`` say how."""

    def __init__(self, message: str, *, http_status: int, nrt_status: str, **extra: object) -> None:
        super().__init__(message)
        self.message = message
        self.http_status = http_status
        self.nrt_status = nrt_status
        self.extra = extra


@dataclass(frozen=True)
class AttachRequest:
    pid: int
    command: str
    tag: str
    runtime_version: str
    kind: str = RUNTIME
    visible_cores: tuple[int, ...] | None = None
    num_cores: int | None = None
    origin: str = ""
    pod: PodRef | None = None  # a runtime process's Kubernetes container (docs/kubernetes.md)


def process_start_time(pid: int) -> float | None:
    """Start time of a live (non-zombie) process, or None if it is gone."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


@dataclass
class _Entry:
    process: NeuronProcess
    start_time: float


class Registry:
    def __init__(
        self,
        inventory: Inventory,
        *,
        start_time_of: Callable[[int], float | None] = process_start_time,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._inventory = inventory.with_processes(())
        self._core_count = inventory.hardware.layout.core_count
        self._start_time_of = start_time_of
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[int, _Entry] = {}
        self._owner: dict[int, int] = {}  # core id -> pid

    @property
    def core_count(self) -> int:
        return self._core_count

    # ----------------------------------------------------------------------------------------
    def attach(self, req: AttachRequest) -> NeuronProcess:
        start = self._start_time_of(req.pid)
        if start is None:
            raise ClaimError(
                f"process {req.pid} is not running on this host (the daemon and its clients must "
                "share one PID namespace)",
                http_status=400,
                nrt_status="NRT_INVALID",
            )
        with self._lock:
            existing = self._entries.get(req.pid)
            if existing is not None and existing.start_time == start:
                raise ClaimError(
                    f"process {req.pid} is already attached"
                    + (
                        f" and holds {format_core_ids(existing.process.neuroncores)}"
                        if existing.process.neuroncores
                        else ""
                    ),
                    http_status=409,
                    nrt_status="NRT_INVALID",
                )
            if existing is not None:  # same PID, older process: it is gone
                self._drop(req.pid)
            cores: tuple[int, ...] = ()
            if req.kind == RUNTIME:
                cores = self._choose_cores(req)
            proc = NeuronProcess(
                pid=req.pid,
                command=req.command,
                tag=req.tag or str(req.pid),
                runtime_version=req.runtime_version if req.kind == RUNTIME else NOT_A_RUNTIME,
                kind=req.kind,
                neuroncores=cores,
                attached_at=self._clock(),
                pod=req.pod if req.kind == RUNTIME else None,
            )
            self._entries[req.pid] = _Entry(proc, start)
            for core in cores:
                self._owner[core] = req.pid
        return proc

    def _holders_text(self, cores: list[int]) -> str:
        """``nc2-nc3 held by PID 6435 ('python3 train.py')`` for each holder of ``cores``."""
        by_pid: dict[int, list[int]] = {}
        for core in sorted(cores):
            by_pid.setdefault(self._owner[core], []).append(core)
        return "; ".join(
            f"{format_core_ids(held)} held by PID {pid} ({self._entries[pid].process.command[:60]!r})"
            for pid, held in by_pid.items()
        )

    def _choose_cores(self, req: AttachRequest) -> tuple[int, ...]:
        n = self._core_count
        last = n - 1
        itype = self._inventory.instance.instance_type
        if req.visible_cores is not None:
            wanted = tuple(req.visible_cores)
            if not wanted:
                raise ClaimError("empty NeuronCore selection", http_status=400, nrt_status="NRT_INVALID")
            bad = [c for c in wanted if not 0 <= c <= last]
            if bad:
                raise ClaimError(
                    f"{req.origin or 'requested cores'}: NeuronCore {bad[0]} does not exist "
                    f"({itype} has NeuronCores 0-{last})",
                    http_status=400,
                    nrt_status="NRT_INVALID",
                )
            if any(b != a + 1 for a, b in itertools.pairwise(wanted)):
                raise ClaimError(
                    f"{req.origin or 'requested cores'}: NeuronCores must be contiguous and increasing",
                    http_status=400,
                    nrt_status="NRT_INVALID",
                )
            return self._take_or_refuse(wanted)
        if req.num_cores is not None:
            k = req.num_cores
            if not 1 <= k <= n:
                raise ClaimError(
                    f"{req.origin or 'NEURON_RT_NUM_CORES'}: asks for {k} NeuronCores, {itype} has {n}",
                    http_status=400,
                    nrt_status="NRT_INVALID",
                )
            for first in range(0, n - k + 1):
                block = tuple(range(first, first + k))
                if not any(c in self._owner for c in block):
                    return block
            free = n - len(self._owner)
            holders = self._holders_text(list(self._owner))
            raise ClaimError(
                f"nrt_allocate_neuron_cores NeuronCore(s) not available - Requested:{k} contiguous "
                f"Available:{free}; {holders}",
                http_status=409,
                nrt_status="NRT_LOAD_NOT_ENOUGH_NC",
            )
        return self._take_or_refuse(tuple(range(n)))

    def _take_or_refuse(self, wanted: tuple[int, ...]) -> tuple[int, ...]:
        held = [c for c in wanted if c in self._owner]
        if held:
            holders = self._holders_text(held)
            raise ClaimError(
                f"nrt_allocate_neuron_cores NeuronCore(s) not available - Requested:{format_core_ids(wanted)} "
                f"Available:{len(wanted) - len(held)}; {holders}",
                http_status=409,
                nrt_status="NRT_EXEC_NC_BUSY",
                held_by=sorted({self._owner[c] for c in held}),
            )
        return wanted

    # ----------------------------------------------------------------------------------------
    def _drop(self, pid: int) -> NeuronProcess | None:
        entry = self._entries.pop(pid, None)
        if entry is None:
            return None
        for core in entry.process.neuroncores:
            if self._owner.get(core) == pid:
                del self._owner[core]
        return entry.process

    def detach(self, pid: int) -> NeuronProcess | None:
        with self._lock:
            proc = self._drop(pid)
        return proc

    def reap(self) -> list[NeuronProcess]:
        """Release every process that is no longer alive. Returns the released ones."""
        with self._lock:
            candidates = [(pid, e.start_time) for pid, e in self._entries.items()]
        dead = [pid for pid, start in candidates if self._start_time_of(pid) != start]
        released: list[NeuronProcess] = []
        if dead:
            with self._lock:
                for pid in dead:
                    entry = self._entries.get(pid)
                    # re-check under the lock: the PID may have re-attached meanwhile
                    if entry is not None and self._start_time_of(pid) != entry.start_time:
                        proc = self._drop(pid)
                        if proc is not None:
                            released.append(proc)
        return released

    # ----------------------------------------------------------------------------------------
    def processes(self) -> list[NeuronProcess]:
        with self._lock:
            return sorted((e.process for e in self._entries.values()), key=lambda p: (p.attached_at, p.pid))

    def get(self, pid: int) -> NeuronProcess | None:
        with self._lock:
            entry = self._entries.get(pid)
            return entry.process if entry else None

    def start_time(self, pid: int) -> float | None:
        """The start time the registry knows process ``pid`` by (None: not attached); a live
        process with another start time is a later one with a recycled PID."""
        with self._lock:
            entry = self._entries.get(pid)
            return entry.start_time if entry else None

    def snapshot(self) -> Inventory:
        return self._inventory.with_processes(self.processes())

    def owners(self) -> dict[int, int]:
        with self._lock:
            return dict(self._owner)
