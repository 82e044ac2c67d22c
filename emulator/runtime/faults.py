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
    efa_bandwidth_factor: float = 1.0  # inter-node bandwidth (replay.efa_extra: docs/faults.md)

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

    def outcome(self, outcome: str) -> str:
        """A completed execution completes with a numerical error while ``nan`` is active."""
        return "completed_with_num_err" if self.nan and outcome == "completed" else outcome

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


def failed_execution(core: int, start: float, total_latency: float, base: dict[str, Any]) -> dict[str, Any]:
    """The report of an execution that a hardware error ended at once: no device time, outcome
    ``completed_with_err``, counted in ``error_summary.hardware``. ``base``: the execution's
    other fields (model, compile cache, memory)."""
    return {
        **base,
        "core": core,
        "start": start,
        "device_seconds": 0.0,
        "compute_seconds": 0.0,
        "total_latency": total_latency,
        "flops": 0,
        "engines": {},
        "outcome": "completed_with_err",
        "error": "hardware",
        "collectives": [],
    }
