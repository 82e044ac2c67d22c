"""neuronx_distributed.utils.batch_utils as neuron-emulator provides it (docs/run-your-script.md §NxD trainer)."""

from typing import Any

from emulator.compat.gaps import NotEmulatedError, not_emulated
from emulator.compat.nxd_state import get_context_model_parallel_size


def get_batch_on_this_context_parallel_rank(batch: Any) -> Any:
    """The batch itself: one context-parallel rank (NxD slices the sequence only for CP > 1)."""
    if get_context_model_parallel_size() > 1:
        raise NotEmulatedError(f"{__name__}.get_batch_on_this_context_parallel_rank", "context parallelism")
    return batch


__all__ = ["get_batch_on_this_context_parallel_rank"]
__getattr__ = not_emulated(__name__)
