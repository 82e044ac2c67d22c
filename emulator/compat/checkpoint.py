"""``torch_xla.utils.checkpoint.checkpoint``: activation recomputation.

The forward of ``function`` runs without keeping its activations; backward runs it again. Both
runs are real device ops here, so the recomputation is in the step's graph and in its cost, as
on Neuron. torch_xla adds optimization barriers so the compiler cannot merge the two runs; an
eager device has nothing to merge. torch_xla defaults to the reentrant variant, and so does this.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.utils.checkpoint as _torch_checkpoint


def checkpoint(function: Callable[..., Any], *args: Any, use_reentrant: bool | None = None, **kwargs: Any) -> Any:
    return _torch_checkpoint.checkpoint(
        function, *args, use_reentrant=True if use_reentrant is None else use_reentrant, **kwargs
    )
