"""Cumulative device counters of the attached processes, and the snapshot consumers read.

A process reports each execution when it starts on the device (start time and simulated
duration). Busy time, per-engine time and FLOPs of an execution count in proportion to how much
of it has elapsed at snapshot time, so a consumer sampling every second sees a smooth,
monotonic counter rather than lumps at step boundaries. Everything else in a snapshot is
read from the real host (psutil) at that moment. The snapshot is built from its typed models
(neurontools/contract/snapshot_models.py, docs/snapshot.md), the ones the tools parse it into.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

from emulator.runtime.execution import Execution
from neurontools.contract.inventory import RUNTIME, Inventory, NeuronProcess
from neurontools.contract.schema import CORE_MEMORY_KEYS as CORE_CATEGORIES
from neurontools.contract.schema import ECC_EVENTS
from neurontools.contract.schema import ENGINE_KEYS as ENGINES
from neurontools.contract.schema import ERROR_SUMMARY_KEYS as ERROR_KINDS
from neurontools.contract.schema import EXECUTION_SUMMARY_KEYS as OUTCOMES
from neurontools.contract.snapshot_models import (
    NO_HOST_MEMORY,
    CollectiveCounters,
    Collectives,
    CompileCache,
    CoreCounters,
    CoreMemoryUsage,
    CpuTimes,
    DeviceCounters,
    ErrorCounts,
    ExecutionCounts,
    HostMemory,
    HostMemoryUsage,
    HostSnapshot,
    JobCounters,
    Latency,
    LoadedModel,
    ProcessMemory,
    RuntimeProcess,
    Snapshot,
    Subgraph,
    SubgraphBreakdown,
    SubgraphDeviceMemory,
    SubgraphMemory,
    VcpuTimes,
)

# which error_summary counter an outcome also increments
OUTCOME_ERRORS = {"completed_with_num_err": "numerical", "completed_with_err": "generic", "timed_out": "runtime"}
LATENCY_WINDOW_S = 600.0


def _fraction(ex: Execution, now: float) -> float:
    """How much of the execution's busy time has elapsed by ``now``."""
    if ex.compute_seconds <= 0:
        return 1.0
    return min(1.0, max(0.0, (now - ex.start) / ex.compute_seconds))


@dataclass
class _CoreCounters:
    busy: float = 0.0
    flops: int = 0
    engines: dict[str, float] = field(default_factory=lambda: dict.fromkeys(ENGINES, 0.0))
    inflight: list[Execution] = field(default_factory=list)

    def settle(self, now: float) -> None:
        """Fold finished executions into the totals."""
        still: list[Execution] = []
        for ex in self.inflight:
            if _fraction(ex, now) >= 1.0:
                self.busy += ex.compute_seconds
                self.flops += ex.flops
                for e, s in ex.engines.items():
                    self.engines[e] = self.engines.get(e, 0.0) + s
            else:
                still.append(ex)
        self.inflight = still

    def view(self, now: float) -> CoreCounters:
        busy, flops, engines = self.busy, float(self.flops), dict(self.engines)
        for ex in self.inflight:
            f = _fraction(ex, now)
            busy += ex.compute_seconds * f
            flops += ex.flops * f
            for e, s in ex.engines.items():
                engines[e] = engines.get(e, 0.0) + s * f
        return CoreCounters(busy=busy, flops=int(flops), engines=engines)


@dataclass
class ProcessTelemetry:
    cores: dict[int, _CoreCounters]
    executions: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ERROR_KINDS, 0))
    latencies: deque[Latency] = field(default_factory=deque)
    compile_cache: dict[str, int] = field(default_factory=lambda: {"hits": 0, "misses": 0})
    collectives: dict[str, dict[str, float]] = field(
        default_factory=lambda: {
            "neuronlink": {"bytes": 0, "operations": 0, "seconds": 0.0},
            "efa": {"bytes": 0, "operations": 0, "seconds": 0.0},
        }
    )
    core_memory: dict[int, dict[str, int]] = field(default_factory=dict)
    peak_memory: dict[int, int] = field(default_factory=dict)
    models: dict[int, dict[str, Any]] = field(default_factory=dict)  # model_id -> model + core
    scheduled: list[Execution] = field(default_factory=list)  # reported ahead of their start


MAX_JOBS = 64  # jobs a node keeps counters for; the oldest is dropped beyond


class Telemetry:
    def __init__(self, inventory: Inventory) -> None:
        self._inventory = inventory
        self._layout = inventory.hardware.layout
        self._lock = threading.Lock()
        self._procs: dict[int, ProcessTelemetry] = {}
        # counters of processes that have exited, so node totals never lose their work
        self._retired = ProcessTelemetry(
            cores={c: _CoreCounters() for d in inventory.devices for c in d.neuroncore_ids}
        )
        self._latency_log: deque[tuple[int, Latency]] = deque()  # (sequence, latency) of every execution
        self._latency_seq = 0
        self._jobs: dict[str, dict[str, float]] = {}  # job id -> JobCounters fields
        self._hw_counters = [
            {"neuron_device_index": d.index, **dict.fromkeys(ECC_EVENTS, 0)}
            for d in inventory.devices
        ]

    # -- process lifecycle (called by the registry owner) ------------------------------------
    def forget(self, pid: int) -> None:
        """The process is gone: fold its counters into the retired totals."""
        with self._lock:
            state = self._procs.pop(pid, None)
            if state is None:
                return
            now = time.monotonic()
            retired = self._retired
            for core, counters in state.cores.items():
                counters.settle(now)
                view = counters.view(now)
                target = retired.cores.setdefault(core, _CoreCounters())
                target.busy += view.busy
                target.flops += view.flops
                for e, s in view.engines.items():
                    target.engines[e] = target.engines.get(e, 0.0) + s
            for key, value in state.executions.items():
                retired.executions[key] += value
            for key, value in state.errors.items():
                retired.errors[key] += value
            for key, value in state.compile_cache.items():
                retired.compile_cache[key] += value
            for link, values in state.collectives.items():
                for key, amount in values.items():
                    retired.collectives[link][key] += amount

    def _state(self, proc: NeuronProcess) -> ProcessTelemetry:
        state = self._procs.get(proc.pid)
        if state is None:
            state = self._procs[proc.pid] = ProcessTelemetry(cores={c: _CoreCounters() for c in proc.neuroncores})
        return state

    def restore(self, proc: NeuronProcess, resume: dict[str, Any]) -> None:
        """A process registering again with this (restarted) daemon: the device memory and loaded
        models it holds (``resume``: AttachBody.resume). Its counters start from zero here."""
        cores = {int(c["core"]): c for c in resume.get("cores", [])}
        models = list(resume.get("models", []))
        owned = set(proc.neuroncores)
        stray = sorted({*cores, *(int(m["core"]) for m in models)} - owned)
        if stray:
            raise ValueError(f"process {proc.pid} does not own NeuronCore {stray[0]}")
        missing = sorted({k for c in cores.values() for k in CORE_CATEGORIES if k not in c["memory"]})
        if missing:
            raise ValueError(f"resume memory must give bytes for every category; missing: {', '.join(missing)}")
        with self._lock:
            state = self._state(proc)
            for core, entry in cores.items():
                state.core_memory[core] = {k: int(entry["memory"][k]) for k in CORE_CATEGORIES}
                state.peak_memory[core] = int(entry.get("peak", 0))
            for model in models:
                state.models[int(model["model_id"])] = {
                    k: model[k] for k in ("model_id", "uuid", "name", "code_bytes", "core")
                }

    # -- injected faults ---------------------------------------------------------------------
    def inject_ecc(self, device: int, event_type: str, count: int) -> dict[str, int]:
        """Count ``count`` ECC events of ``event_type`` on ``device`` (faults on demand)."""
        if not 0 <= device < len(self._hw_counters):
            raise ValueError(f"neuron_device {device} does not exist (0-{len(self._hw_counters) - 1})")
        if event_type not in ECC_EVENTS:
            raise ValueError(f"unknown ECC event type {event_type!r} (expected one of {', '.join(ECC_EVENTS)})")
        with self._lock:
            self._hw_counters[device][event_type] += count
            return dict(self._hw_counters[device])

    # -- reports from launchers -------------------------------------------------------------
    def record_job_step(self, job_id: str, step_seconds: float, wait_seconds: float, samples: int) -> dict[str, Any]:
        """One step of job ``job_id`` done on this node (docs/multinode.md); returns its counters."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                if len(self._jobs) >= MAX_JOBS:
                    del self._jobs[next(iter(self._jobs))]
                job = self._jobs[job_id] = {"steps": 0, "step_seconds": 0.0, "wait_seconds": 0.0, "samples": 0}
            job["steps"] += 1
            job["step_seconds"] += step_seconds
            job["wait_seconds"] += wait_seconds
            job["samples"] += samples
            return {"job_id": job_id, **job}

    # -- reports from processes --------------------------------------------------------------
    def record_executions(self, proc: NeuronProcess, executions: list[Execution]) -> None:
        """Executions on the process's cores. Busy time counts as the device time elapses; an
        execution reported ahead of its start (a replaying rank sends a step's graphs at once) is
        counted — outcome, latency, collectives, memory — when it starts. All or nothing: an
        execution on a core the process does not own refuses the whole batch (ValueError)."""
        for ex in executions:
            if ex.core not in proc.neuroncores:
                raise ValueError(f"process {proc.pid} does not own NeuronCore {ex.core}")
        with self._lock:
            state = self._state(proc)
            now = time.monotonic()
            for ex in executions:
                state.cores[ex.core].inflight.append(ex)
                if ex.start > now:
                    state.scheduled.append(ex)
                else:
                    self._count(state, ex)
            state.scheduled.sort(key=lambda ex: ex.start)
            self._promote(state, now)
            for counters in state.cores.values():
                counters.settle(now)

    def _promote(self, state: ProcessTelemetry, now: float) -> None:
        """Count the scheduled executions that have started by ``now`` (in start order)."""
        while state.scheduled and state.scheduled[0].start <= now:
            self._count(state, state.scheduled.pop(0))

    def _count(self, state: ProcessTelemetry, ex: Execution) -> None:
        state.executions[ex.outcome] += 1
        if ex.error is not None:
            state.errors[ex.error] += 1
        elif ex.outcome in OUTCOME_ERRORS:
            state.errors[OUTCOME_ERRORS[ex.outcome]] += 1
        end = ex.start + min(ex.device_seconds, ex.total_latency)
        latency = Latency(end, ex.total_latency, ex.device_seconds)
        state.latencies.append(latency)
        while state.latencies and state.latencies[0].end < end - LATENCY_WINDOW_S:
            state.latencies.popleft()
        self._latency_seq += 1
        self._latency_log.append((self._latency_seq, latency))
        while self._latency_log and self._latency_log[0][1].end < end - LATENCY_WINDOW_S:
            self._latency_log.popleft()
        state.compile_cache = {"hits": ex.compile_cache.hits, "misses": ex.compile_cache.misses}
        for c in ex.collectives:
            for link, nbytes in c.counted_bytes().items():
                state.collectives[link]["bytes"] += nbytes * c.count
                state.collectives[link]["operations"] += c.count
            state.collectives[c.time_link]["seconds"] += c.seconds * c.count
        if ex.memory.core is not None:
            state.core_memory[ex.core] = asdict(ex.memory.core)
            state.peak_memory[ex.core] = ex.memory.peak
        if ex.model is not None:
            state.models[ex.model.model_id] = {**asdict(ex.model), "core": ex.core}

    # -- reading -----------------------------------------------------------------------------
    def memory(self, proc: NeuronProcess) -> dict[str, Any]:
        """Device bytes per owned core by category, with the ledger's high-water mark ``peak``."""
        with self._lock:
            state = self._state(proc)
            self._promote(state, time.monotonic())
            return {
                "cores": {
                    str(c): {
                        **(state.core_memory.get(c) or dict.fromkeys(CORE_CATEGORIES, 0)),
                        "peak": state.peak_memory.get(c, 0),
                    }
                    for c in sorted(state.cores)
                }
            }

    def snapshot(self, processes: list[NeuronProcess], latencies_since: float | None = None) -> Snapshot:
        """The snapshot of docs/snapshot.md; with ``latencies_since`` the latency lists hold only
        executions that ended after that daemon-monotonic time (what a consumer has not seen)."""
        now = time.monotonic()
        since = -math.inf if latencies_since is None else latencies_since
        inv = self._inventory
        entries = []
        with self._lock:
            for proc in processes:
                if proc.kind != RUNTIME:
                    continue
                entries.append(self._process_entry(proc, self._state(proc), now, since))
            hw = tuple(DeviceCounters(**d) for d in self._hw_counters)
            retired = self._retired_entry(now)
            latency_log = tuple(x for x in self._latency_log if x[1].end > since)
            jobs = tuple(
                JobCounters(
                    job_id=job_id,
                    steps=int(j["steps"]),
                    step_seconds=j["step_seconds"],
                    wait_seconds=j["wait_seconds"],
                    samples=int(j["samples"]),
                )
                for job_id, j in self._jobs.items()
            )
        return Snapshot(
            time=time.time(),
            monotonic=now,
            instance=inv.instance,
            hardware=inv.hardware,
            processes=tuple(entries),
            host=host_snapshot(),
            hardware_counters=hw,
            retired=retired,
            latency_log=latency_log,
            jobs=jobs,
        )

    def _retired_entry(self, now: float) -> RuntimeProcess:
        """Exited processes' cumulative counters, shaped like a process entry (pid 0)."""
        r = self._retired
        return RuntimeProcess(
            pid=0,
            tag="retired",
            command="",
            runtime_version="",
            neuroncores=tuple(sorted(r.cores)),
            cpu=None,
            cpu_error="",
            cores={c: r.cores[c].view(now) for c in sorted(r.cores)},
            executions=ExecutionCounts(**r.executions),
            errors=ErrorCounts(**r.errors),
            latencies=(),
            compile_cache=CompileCache(**r.compile_cache),
            collectives=_collectives(r),
            memory=ProcessMemory(host=NO_HOST_MEMORY, cores={}),
            loaded_models=(),
        )

    def _process_entry(
        self, proc: NeuronProcess, state: ProcessTelemetry, now: float, since: float = -math.inf
    ) -> RuntimeProcess:
        cpu: CpuTimes | None
        cpu_error = ""
        rss = 0
        try:
            p = psutil.Process(proc.pid)
            with p.oneshot():
                times = p.cpu_times()
                rss = p.memory_info().rss
            cpu = CpuTimes(user=times.user, system=times.system)
        except psutil.Error:
            cpu = None
            cpu_error = f"open /proc/{proc.pid}/stat: no such file or directory"
        self._promote(state, now)
        cores = {}
        for core, counters in sorted(state.cores.items()):
            counters.settle(now)
            cores[core] = counters.view(now)
        core_memory = {
            c: CoreMemoryUsage(**(state.core_memory.get(c) or dict.fromkeys(CORE_CATEGORIES, 0)))
            for c in sorted(state.cores)
        }
        return RuntimeProcess(
            pid=proc.pid,
            tag=proc.tag,
            command=proc.command,
            runtime_version=proc.runtime_version,
            kind=RUNTIME,
            neuroncores=tuple(proc.neuroncores),
            pod=proc.pod,
            cpu=cpu,
            cpu_error=cpu_error,
            cores=cores,
            executions=ExecutionCounts(**state.executions),
            errors=ErrorCounts(**state.errors),
            latencies=tuple(x for x in state.latencies if x.end > since),
            compile_cache=CompileCache(**state.compile_cache),
            collectives=_collectives(state),
            memory=ProcessMemory(
                # the process's real resident memory is its host "application memory"
                host=HostMemoryUsage(application_memory=rss, constants=0, dma_buffers=0, tensors=0),
                cores=core_memory,
            ),
            loaded_models=tuple(self._model_entry(m) for _, m in sorted(state.models.items())),
        )

    def _model_entry(self, model: dict[str, Any]) -> LoadedModel:
        core = int(model["core"])
        code = int(model["code_bytes"])
        device = SubgraphDeviceMemory(constants=0, model_code=code, runtime_memory=0, tensors=0)
        return LoadedModel(
            name=model["name"],
            uuid=model["uuid"],
            model_id=int(model["model_id"]),
            is_running=True,
            subgraphs={
                "sg_00": Subgraph(
                    memory_used_bytes=SubgraphMemory(
                        host=0,
                        neuron_device=code,
                        usage_breakdown=SubgraphBreakdown(host=NO_HOST_MEMORY, neuron_device=device),
                    ),
                    neuroncore_index=self._layout.local_core(core),
                    neuron_device_index=self._layout.device_of(core),
                )
            },
        )


def _collectives(state: ProcessTelemetry) -> Collectives:
    return Collectives(
        **{
            link: CollectiveCounters(int(c["bytes"]), int(c["operations"]), float(c["seconds"]))
            for link, c in state.collectives.items()
        }
    )


def host_snapshot() -> HostSnapshot:
    """The real host's cumulative CPU times, context switches and memory (psutil)."""
    vm = psutil.virtual_memory()
    swap = psutil.swap_memory()
    vcpus = tuple(
        VcpuTimes(
            user=t.user,
            nice=t.nice,
            system=t.system,
            idle=t.idle,
            io_wait=getattr(t, "iowait", 0.0),
            irq=getattr(t, "irq", 0.0),
            soft_irq=getattr(t, "softirq", 0.0),
        )
        for t in psutil.cpu_times(percpu=True)
    )
    return HostSnapshot(
        vcpus=vcpus,
        context_switches=psutil.cpu_stats().ctx_switches,
        memory=HostMemory(total=vm.total, used=vm.total - vm.available, swap_total=swap.total, swap_used=swap.used),
    )
