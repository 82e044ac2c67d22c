"""torch_xla.distributed.fsdp.wrap as neuron-emulator provides it (docs/run-your-script.md §FSDP)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.xla_fsdp import size_based_auto_wrap_policy, transformer_auto_wrap_policy

__all__ = ["size_based_auto_wrap_policy", "transformer_auto_wrap_policy"]
__getattr__ = not_emulated(__name__)
