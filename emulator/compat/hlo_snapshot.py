"""``libneuronxla.register_hlo_snapshot_callback``: the Neuron PJRT plugin's hook that decides, per
execution, whether to dump the executed HLO's inputs and outputs (docs/run-your-script.md). The
callback is kept and asked after every step graph executes, as the plugin asks it; the emulator
has no HLO, so a callback that asks for a snapshot (returns a non-empty string) gets a
``NotEmulatedError`` instead of a silent nothing."""

from __future__ import annotations

from collections.abc import Callable

from emulator.compat.gaps import NotEmulatedError

Callback = Callable[[str, int, int], str]
_callbacks: list[Callback] = []
_executions = [0]


def register_hlo_snapshot_callback(callback: Callback) -> None:
    _callbacks[:] = [callback]


def after_execution(name: str, device_index: int = 0) -> None:
    """Ask the registered callback about the execution that just ended."""
    _executions[0] += 1
    for callback in _callbacks:
        wanted = callback(name, device_index, _executions[0])
        if wanted:
            raise NotEmulatedError(
                "libneuronxla HLO snapshots", f"the emulator executes no HLO to dump ({wanted!r} was asked for)"
            )
