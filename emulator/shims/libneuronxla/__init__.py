"""libneuronxla (the Neuron PJRT plugin's Python module) as neuron-emulator provides it
(docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.hlo_snapshot import register_hlo_snapshot_callback

__all__ = ["register_hlo_snapshot_callback"]
__getattr__ = not_emulated(__name__)
