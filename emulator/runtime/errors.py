"""The error the emulated Neuron runtime raises in a training process."""

from __future__ import annotations


class NeuronRuntimeError(RuntimeError):
    """The emulated runtime refused an operation: ``status`` is the NRT status name
    (``NRT_RESOURCE``, ``NRT_EXEC_NC_BUSY``, ...; docs/reference/trn1-runtime.md §Status codes)."""

    def __init__(self, status: str, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(f"{status}: {message}")
