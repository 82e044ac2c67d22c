"""The daemon source's mapping: one ``Period`` (two snapshots, neurontools/report/period.py) -> ``Sample``.

Every figure is read once from the period or the current snapshot, as the period computes it
(shares 0-1, FLOP/s, executions per second): no report in between, no percent. The rules are
neuron-monitor's (docs/reference/neuron-monitor.md §Report), so the screen shows what the same
daemon's neuron-monitor would report:

* the first snapshot (no baseline) has memory and the instance's layout, no per-period figure
  (``None``, ``NA`` on screen);
* a process that attached during the period counts its device work from zero; its CPU use is
  known from its second snapshot on;
* per-core figures are the live processes' (``Period.live_cores``, docs/architecture.md §Two
  kinds of per-core figure).

Engine shares are many numbers few screens show (the engine view, key ``e``): they are worked
out when first read, once per sample.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple

from neurontools.contract.inventory import CoreLayout
from neurontools.contract.schema import CORE_MEMORY_KEYS, HOST_MEMORY_KEYS, SUBGRAPH_DEVICE_MEMORY_KEYS
from neurontools.contract.snapshot_models import LoadedModel, ProcessMemory, ProcessSnapshot
from neurontools.report.period import Period, ProcessPeriod
from neurontools.top.model import ENGINE_NAMES, AppSample, CoreStat, ModelMemory, Sample


class EngineShares(Mapping[int, Mapping[str, float]]):
    """Busy share (0-1) of every engine of every core over a period, by the live processes,
    computed on first use."""

    def __init__(self, period: Period) -> None:
        self._period = period
        self._values: dict[int, dict[str, float]] | None = None

    def _computed(self) -> dict[int, dict[str, float]]:
        if self._values is None:
            self._values = {
                core: {engine: work.engine_utilization(engine) for engine in ENGINE_NAMES}
                for core, work in self._period.live_cores().items()
            }
        return self._values

    def __getitem__(self, core: int) -> Mapping[str, float]:
        return self._computed()[core]

    def __iter__(self) -> Iterator[int]:
        return iter(self._computed())

    def __len__(self) -> int:
        return len(self._computed())


def _models(models: tuple[LoadedModel, ...], layout: CoreLayout) -> tuple[ModelMemory, ...]:
    """Each loaded model's load-time memory per core it has subgraphs on (summed there), in core order."""
    out: list[ModelMemory] = []
    for model in models:
        per_core: dict[int, tuple[dict[str, int], dict[str, int]]] = {}
        for sub in model.subgraphs.values():
            core = layout.core_id(sub.neuron_device_index, sub.neuroncore_index)
            device, host = per_core.setdefault(
                core, (dict.fromkeys(SUBGRAPH_DEVICE_MEMORY_KEYS, 0), dict.fromkeys(HOST_MEMORY_KEYS, 0))
            )
            for key in SUBGRAPH_DEVICE_MEMORY_KEYS:
                device[key] += getattr(sub.device_breakdown, key)
            for key in HOST_MEMORY_KEYS:
                host[key] += getattr(sub.host_breakdown, key)
        out.extend(
            ModelMemory(name=model.name, model_id=model.model_id, core=core, device=device, host=host)
            for core, (device, host) in sorted(per_core.items())
        )
    return tuple(out)


class MemoryFields(NamedTuple):
    """A process's memory as ``AppSample`` holds it (gauges: known from its first snapshot)."""

    host_memory: Mapping[str, int]  # HOST_MEMORY_KEYS -> bytes
    host_total: int
    device_total: int
    core_memory: Mapping[int, Mapping[str, int]]  # core -> CORE_MEMORY_KEYS -> bytes
    models: tuple[ModelMemory, ...]


def memory_fields(memory: ProcessMemory, models: tuple[LoadedModel, ...], layout: CoreLayout) -> MemoryFields:
    return MemoryFields(
        host_memory={key: getattr(memory.host, key) for key in HOST_MEMORY_KEYS},
        host_total=memory.host.total,
        device_total=sum(usage.total for usage in memory.cores.values()),
        core_memory={
            core: {key: getattr(usage, key) for key in CORE_MEMORY_KEYS} for core, usage in sorted(memory.cores.items())
        },
        models=_models(models, layout) if layout.cores_per_device else (),
    )


def _vcpu(process: ProcessPeriod) -> tuple[float, float] | None:
    user, system = process.cpu_share("user"), process.cpu_share("system")
    return (user, system) if user is not None and system is not None else None


def app_sample(process: ProcessPeriod, memory: MemoryFields, measured: bool) -> AppSample:
    """One live runtime process; ``measured``: the period has a baseline (else only gauges)."""
    proc = process.proc
    return AppSample(
        pid=proc.pid,
        tag=proc.tag or str(proc.pid),
        cores=tuple(sorted(proc.neuroncores)),
        core_stats=(
            {core: CoreStat(work.utilization, work.flops_per_second) for core, work in process.cores.items()}
            if measured
            else None
        ),
        vcpu=_vcpu(process) if measured else None,
        steps_per_second=process.steps_per_second if measured else None,
        command=proc.command or None,
        compile_hits=proc.compile_cache.hits,
        compile_misses=proc.compile_cache.misses,
        host_memory=memory.host_memory,
        host_total=memory.host_total,
        device_total=memory.device_total,
        core_memory=memory.core_memory,
        models=memory.models,
    )


class PeriodReader:
    """``Sample`` of each period of one daemon's snapshots.

    A process's memory and loaded models are most of what it holds and rarely change: a
    ``SnapshotParser`` then hands back the same objects, and their ``MemoryFields`` are the
    previous ones (an identity check; new objects are mapped). Processes that left are forgotten.
    """

    def __init__(self, tools_version: str) -> None:
        self.tools_version = tools_version
        self._memory: dict[int, tuple[ProcessMemory, tuple[LoadedModel, ...], MemoryFields]] = {}

    def _memory_of(self, proc: ProcessSnapshot, layout: CoreLayout) -> MemoryFields:
        known = self._memory.get(proc.pid)
        if known is not None and known[0] is proc.memory and known[1] is proc.loaded_models:
            return known[2]
        fields = memory_fields(proc.memory, proc.loaded_models, layout)
        self._memory[proc.pid] = (proc.memory, proc.loaded_models, fields)
        return fields

    def read(self, period: Period) -> Sample:
        """Everything neuron-top shows for ``period`` (``history`` and ``sequence`` are the sampler's)."""
        cur, measured = period.cur, period.base is not None
        instance, hardware = cur.instance, cur.hardware
        per_device = hardware.neuroncore_per_device_count
        processes = period.processes
        self._memory = {pid: known for pid, known in self._memory.items() if pid in processes}
        vcpu = period.vcpu_mean_shares if measured else None
        return Sample(
            tools_version=self.tools_version,
            instance_id=instance.instance_id or None,
            instance_type=instance.instance_type or None,
            neuroncore_version=hardware.neuroncore_version or None,
            device_count=hardware.neuron_device_count or None,
            cores_per_device=per_device or None,
            device_memory_size=hardware.neuron_device_memory_size or None,
            system_vcpu=(vcpu["user"], vcpu["system"]) if vcpu is not None else None,
            apps=tuple(
                app_sample(process, self._memory_of(process.proc, hardware.layout), measured)
                for process in processes.values()
            ),
            engines=EngineShares(period) if measured else None,
        )
