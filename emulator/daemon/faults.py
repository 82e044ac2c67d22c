"""The faults active on the emulated node, per NeuronCore (docs/faults.md).

The daemon holds them; a process learns its cores' faults from the daemon's answer to each
execution report (one execution, or a replaying rank's batch) and applies them from its next
execution on. Nothing here touches a counter: ECC events are counted by the telemetry, and a
pending hardware failure is consumed when the failed execution is reported.

Thread-safe; every public method takes the lock.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

# an uncorrectable ECC event makes the next execution on the core fail with this NRT status
from emulator.runtime.faults import HARDWARE_ERROR_STATUS as HARDWARE_ERRORS
from emulator.runtime.faults import NO_FAULTS, CoreFaults
from neurontools.contract.inventory import CoreLayout


class FaultTable:
    """``devices``: the NeuronCore ids of each Neuron device, by device index."""

    def __init__(self, layout: CoreLayout) -> None:
        self._layout = layout
        self._lock = threading.Lock()
        self._cores: dict[int, CoreFaults] = {}  # the EFA factor is the node's: kept apart
        self._efa_bandwidth_factor = 1.0

    def check_cores(self, cores: list[int]) -> None:
        bad = [c for c in cores if not 0 <= c < self._layout.core_count]
        if bad:
            raise ValueError(f"NeuronCore {bad[0]} does not exist (0-{self._layout.core_count - 1})")

    def targets(self, neuron_device: int | None, core: int | None) -> list[int]:
        """The cores a fault applies to: ``core``, else every core of ``neuron_device``, else of the node."""
        if neuron_device is not None and not 0 <= neuron_device < self._layout.device_count:
            raise ValueError(f"neuron_device {neuron_device} does not exist (0-{self._layout.device_count - 1})")
        if core is not None:
            self.check_cores([core])
            if neuron_device is not None and self._layout.device_of(core) != neuron_device:
                raise ValueError(f"NeuronCore {core} is not on neuron_device {neuron_device}")
            return [core]
        if neuron_device is not None:
            return list(self._layout.cores_of(neuron_device))
        return list(range(self._layout.core_count))

    def device_of(self, core: int) -> int:
        return self._layout.device_of(core)

    def slow(self, cores: list[int], factor: float) -> None:
        """Executions on ``cores`` take ``factor`` x their modelled device time (replaces an earlier factor)."""
        self.check_cores(cores)
        with self._lock:
            for core in cores:
                self._cores[core] = replace(self._cores.get(core, NO_FAULTS), slow_factor=factor)

    def nan(self, cores: list[int]) -> None:
        """Executions on ``cores`` complete with a numerical error until cleared."""
        self.check_cores(cores)
        with self._lock:
            for core in cores:
                self._cores[core] = replace(self._cores.get(core, NO_FAULTS), nan=True)

    def arm_hardware_error(self, cores: list[int], event_type: str) -> None:
        """The next execution on each of ``cores`` fails with the runtime's hardware error."""
        if event_type not in HARDWARE_ERRORS:
            raise ValueError(f"{event_type} is correctable: it fails no execution")
        self.check_cores(cores)
        with self._lock:
            for core in cores:
                self._cores[core] = replace(self._cores.get(core, NO_FAULTS), hardware_error=event_type)

    def consume_hardware_error(self, core: int) -> None:
        """A process reported the failed execution on ``core``: the pending failure is spent."""
        with self._lock:
            entry = self._cores.get(core)
            if entry is not None:
                self._cores[core] = replace(entry, hardware_error=None)

    @property
    def efa_bandwidth_factor(self) -> float:
        with self._lock:
            return self._efa_bandwidth_factor

    def efa(self, factor: float) -> None:
        with self._lock:
            self._efa_bandwidth_factor = factor

    def clear(self) -> None:
        """Clear every fault of the node (counted ECC events stay: counters are monotonic)."""
        with self._lock:
            self._cores.clear()
            self._efa_bandwidth_factor = 1.0

    def state(self, cores: list[int] | None = None) -> dict[str, Any]:
        """The active faults (of ``cores``, default every core): the ``FaultState`` of the API."""
        with self._lock:
            wanted = sorted(self._cores) if cores is None else sorted(c for c in cores if c in self._cores)
            return {
                "efa_bandwidth_factor": self._efa_bandwidth_factor,
                "cores": [self._cores[c].to_wire(c) for c in wanted if self._cores[c].active()],
            }
