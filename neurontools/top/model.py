"""The immutable view model neuron-top draws from: one ``Sample`` per refresh.

Utilization, engine and CPU figures are shares (0-1, like the period's): only the screen's
number formats (``top.formats``) and bars show them as percent.

Everything a source could not tell is ``None`` (shown as ``NA``): a group the report does not
carry yet, a field only the daemon snapshot has (engines, command, compile cache) when reading
neuron-monitor reports, every value while the source is unreachable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

from neurontools.contract.inventory import CoreLayout, first_by_pid
from neurontools.contract.names import ENGINES
from neurontools.contract.schema import CORE_MEMORY_KEYS, HOST_MEMORY_KEYS

# Engine keys of the snapshot and the names neuron-top shows for them, in display order.
ENGINE_NAMES: Mapping[str, str] = {e.key: e.label for e in ENGINES}
HISTORY_LENGTH = 60  # samples of utilization history kept per core


@dataclass(frozen=True)
class CoreStat:
    """One NeuronCore as one process uses it over the last period."""

    utilization: float | None  # busy share 0-1
    flops: float | None  # FLOP/s


@dataclass(frozen=True)
class ModelMemory:
    """Load-time memory of one loaded model on one NeuronCore (its subgraphs there, summed)."""

    name: str
    model_id: int
    core: int  # global NeuronCore index
    device: Mapping[str, int]  # SUBGRAPH_DEVICE_MEMORY_KEYS -> bytes
    host: Mapping[str, int]  # HOST_MEMORY_KEYS -> bytes

    @property
    def device_total(self) -> int:
        return sum(self.device.values())

    @property
    def host_total(self) -> int:
        return sum(self.host.values())


@dataclass(frozen=True)
class AppSample:
    """One Neuron application (a runtime process), as the report and the snapshot describe it."""

    pid: int
    tag: str
    cores: tuple[int, ...] | None = None  # global NeuronCores it owns; None: unknown
    core_stats: Mapping[int, CoreStat] | None = None  # None: neuroncore_counters not collected yet
    vcpu: tuple[float, float] | None = None  # (user, system) CPU share: 1 = one vCPU busy
    host_memory: Mapping[str, int] | None = None  # HOST_MEMORY_KEYS -> bytes; None: memory_used missing
    host_total: int | None = None
    device_total: int | None = None
    core_memory: Mapping[int, Mapping[str, int]] | None = None  # core -> CORE_MEMORY_KEYS -> bytes
    models: tuple[ModelMemory, ...] = ()
    steps_per_second: float | None = None  # executions finished per second (execution_stats)
    command: str | None = None  # snapshot only
    compile_hits: int | None = None  # snapshot only
    compile_misses: int | None = None  # snapshot only

    def blanked(self) -> AppSample:
        """The same application with every value unknown (the source stopped answering)."""
        return AppSample(pid=self.pid, tag=self.tag, cores=self.cores, command=self.command)


@dataclass(frozen=True)
class Sample:
    """Everything shown on one refresh, for every tab."""

    tools_version: str
    instance_id: str | None = None
    instance_type: str | None = None
    neuroncore_version: str | None = None
    device_count: int | None = None
    cores_per_device: int | None = None
    device_memory_size: int | None = None  # bytes of HBM per device
    system_vcpu: tuple[float, float] | None = None  # (user, system) share averaged over the host's vCPUs
    apps: tuple[AppSample, ...] = ()
    # engine busy share per global core over the last period (all processes); None: source lacks it
    engines: Mapping[int, Mapping[str, float]] | None = None
    # utilization (share) history per (pid or None for all applications, core), oldest first; None: a gap
    history: Mapping[tuple[int | None, int], tuple[float | None, ...]] = field(default_factory=dict)
    error: str | None = None  # why the source cannot be read right now (shown as a banner)
    live: bool = True  # False while the source is unreachable: no current value is known
    sequence: int = 0  # increases with every sample that carries new data

    @cached_property
    def layout(self) -> CoreLayout | None:
        """The core/device arithmetic of the instance (None until the source tells it)."""
        if self.device_count is None or self.cores_per_device is None:
            return None
        return CoreLayout(self.device_count, self.cores_per_device)

    @property
    def core_count(self) -> int | None:
        return None if self.layout is None else self.layout.core_count

    def app(self, pid: int) -> AppSample | None:
        return self._apps_by_pid.get(pid)

    @cached_property
    def _apps_by_pid(self) -> dict[int, AppSample]:
        """Each PID's first application (a sample never changes: made once, on first use)."""
        return first_by_pid(self.apps)

    def unreachable(self, error: str) -> Sample:
        """This sample's layout (instance, devices, tabs) with every value unknown and ``error``."""
        return replace(
            self,
            system_vcpu=None,
            apps=tuple(app.blanked() for app in self.apps),
            engines=None,
            error=error,
            live=False,
        )


def empty_core_memory() -> dict[str, int]:
    return dict.fromkeys(CORE_MEMORY_KEYS, 0)


def empty_host_memory() -> dict[str, int]:
    return dict.fromkeys(HOST_MEMORY_KEYS, 0)
