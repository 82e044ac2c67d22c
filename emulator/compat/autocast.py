"""``torch_xla.amp.autocast``: ``torch.autocast`` on device ``xla`` (docs/run-your-script.md
§Autocast). The cast policy itself is registered by the native device backend
(``emulator/capture/native/autocast_xla.cpp``): matrix products in the autocast dtype, softmax,
batch norm and the losses in FP32. On a NeuronCore the default dtype is BF16, as torch_xla picks
it for Neuron and TPU devices.
"""

from __future__ import annotations

from typing import Any

import torch

from emulator.compat.gaps import NotEmulatedError


class autocast(torch.amp.autocast_mode.autocast):  # torch_xla's name
    def __init__(
        self, device: Any = None, enabled: bool = True, dtype: torch.dtype | None = None, cache_enabled: bool = True
    ) -> None:
        if device is not None and torch.device(device).type != "xla":
            raise NotEmulatedError(f"torch_xla.amp.autocast(device={device!r})", "only the xla device is emulated")
        super().__init__("xla", enabled=enabled, dtype=dtype or torch.bfloat16, cache_enabled=cache_enabled)
