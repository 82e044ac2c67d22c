"""neuronx_distributed.utils.model_utils as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.nxd_layers import move_model_to_device

__all__ = ["move_model_to_device"]
__getattr__ = not_emulated(__name__)
