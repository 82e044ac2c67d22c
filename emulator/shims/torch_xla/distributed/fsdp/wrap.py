"""torch_xla.distributed.fsdp.wrap as neuron-emulator provides it (docs/run-your-script.md §FSDP)."""

from emulator.compat.fsdp_wrap import (
    always_wrap_policy,
    lambda_auto_wrap_policy,
    recursive_wrap,
    size_based_auto_wrap_policy,
    transformer_auto_wrap_policy,
)
from emulator.compat.gaps import not_emulated

__all__ = [
    "always_wrap_policy",
    "lambda_auto_wrap_policy",
    "recursive_wrap",
    "size_based_auto_wrap_policy",
    "transformer_auto_wrap_policy",
]
__getattr__ = not_emulated(__name__)
