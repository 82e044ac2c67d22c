"""``torch_xla.amp.syncfree``: Adam, AdamW and SGD whose ``step`` takes ``found_inf`` — the
gradient scaler's "a gradient overflowed" flag as a device tensor — and then skips the update,
with no host round trip on a Trn1 (docs/run-your-script.md). Otherwise each is PyTorch's
optimizer of the same name, the same update. Here the flag is read on the host: the emulated
device's values live there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def _skipped(found_inf: torch.Tensor | float | None) -> bool:
    if found_inf is None:
        return False
    value = found_inf.detach().cpu() if isinstance(found_inf, torch.Tensor) else torch.tensor(found_inf)
    return bool((value != 0).any())


class _SyncFree:
    """``step(closure=None, found_inf=None)``: the base optimizer's step unless ``found_inf`` says an
    overflow was found, in which case the parameters and the state stay as they are."""

    def step(self, closure: Callable[[], Any] | None = None, found_inf: torch.Tensor | None = None) -> Any:
        if _skipped(found_inf):
            if closure is None:
                return None
            with torch.enable_grad():
                return closure()
        return super().step(closure)  # type: ignore[misc]


class Adam(_SyncFree, torch.optim.Adam):
    pass


class AdamW(_SyncFree, torch.optim.AdamW):
    pass


class SGD(_SyncFree, torch.optim.SGD):
    pass
