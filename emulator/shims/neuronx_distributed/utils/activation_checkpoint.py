"""neuronx_distributed.utils.activation_checkpoint as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.nxd_trainer import apply_activation_checkpointing

__all__ = ["apply_activation_checkpointing"]
__getattr__ = not_emulated(__name__)
