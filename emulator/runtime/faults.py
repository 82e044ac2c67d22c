"""The faults a training process applies to its executions (docs/faults.md).

The daemon answers every execution report (``POST .../executions`` and ``.../executions/batch``)
with the faults active on the process's cores; the process keeps the latest answer for its core
and applies it from its next execution on — no request of its own per step. Without a daemon
there are no faults (they live in the daemon).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emulator.runtime.errors import NeuronRuntimeError
from neurontools.contract.names import MEM_ECC_UNCORRECTED, SRAM_ECC_UNCORRECTED

# NRT status of an execution that hits an uncorrectable ECC error (nrt_status.h): HBM, NeuronCore SRAM
HARDWARE_ERROR_STATUS = {
    MEM_ECC_UNCORRECTED.key: "NRT_EXEC_HW_ERR_HBM_UE",
    SRAM_ECC_UNCORRECTED.key: "NRT_EXEC_HW_ERR_NC_UE",
}
_WHERE = {MEM_ECC_UNCORRECTED.key: "device memory (HBM)", SRAM_ECC_UNCORRECTED.key: "on-chip SRAM"}


@dataclass(frozen=True)
class CoreFaults:
    """The faults of one NeuronCore as the daemon last answered them."""

    slow_factor: float = 1.0
    nan: bool = False
    hardware_error: str | None = None  # uncorrectable ECC event type: the next execution fails
    efa_bandwidth_factor: float = 1.0  # the node's inter-node bandwidth (execution.execution: docs/faults.md)

    def active(self) -> bool:
        """Whether the core has a fault of its own (the EFA factor is the node's)."""
        return self.slow_factor != 1.0 or self.nan or self.hardware_error is not None

    def to_wire(self, core: int) -> dict[str, Any]:
        """The core's entry of a ``FaultState`` (what :meth:`from_answer` reads back)."""
        return {"core": core, "slow_factor": self.slow_factor, "nan": self.nan, "hardware_error": self.hardware_error}

    @classmethod
    def from_answer(cls, answer: Any, core: int) -> CoreFaults:
        """The core's faults from an execution answer (``ExecutionAnswer``: the node's fault state,
        cores without faults left out)."""
        state = answer["faults"]
        efa = float(state["efa_bandwidth_factor"])
        for entry in state["cores"]:
            if entry["core"] == core:
                return cls(
                    slow_factor=max(1.0, float(entry["slow_factor"])),
                    nan=bool(entry["nan"]),
                    hardware_error=entry["hardware_error"] or None,
                    efa_bandwidth_factor=efa,
                )
        return cls(efa_bandwidth_factor=efa)

    def hardware_failure(self, core: int, what: str) -> NeuronRuntimeError | None:
        """The runtime's error for an execution failed by the armed ECC event, or None."""
        event = self.hardware_error
        if event is None:
            return None
        status = HARDWARE_ERROR_STATUS.get(event, "NRT_EXEC_HW_ERR_NC_UE")
        return NeuronRuntimeError(
            status,
            f"{what} on nc{core} failed: uncorrectable ECC error in {_WHERE.get(event, 'the device')} "
            f"({event}); the NeuronCore's state is lost",
        )


NO_FAULTS = CoreFaults()
