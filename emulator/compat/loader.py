"""``torch_xla.distributed.parallel_loader`` on the emulator: ``MpDeviceLoader`` and
``ParallelLoader(...).per_device_loader(device)``.

Each batch the host loader yields is moved to the device (its tensors, in nested lists, tuples
and dicts) and handed out. As in torch_xla, every request for a batch first ends the step with
``mark_step`` (every ``batches_per_execution`` requests), the first request included, and the
exhausted loader ends the last step — which is why a training loop over such a loader needs
no ``mark_step`` of its own.
torch_xla moves batches on background threads, ahead of the step; here the move happens when
the batch is asked for (the values are the same; the emulated device time is not affected, as
host-to-device copies of inputs are not part of a step's graph in torch_xla either).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

from emulator.compat import xla_model


class PerDeviceLoader:
    """Batches on ``device``; ends a step before handing out a batch and at the end."""

    def __init__(self, loader: Iterable[Any], device: torch.device | str, batches_per_execution: int = 1) -> None:
        if batches_per_execution < 1:
            raise ValueError(f"batches_per_execution must be at least 1, not {batches_per_execution}")
        self._loader = loader
        self._device = torch.device(device)
        self._every = batches_per_execution

    def __iter__(self) -> Iterator[Any]:
        since_step = 0
        for batch in self._loader:
            if since_step >= self._every - 1:
                since_step = 0
                xla_model.mark_step()
            else:
                since_step += 1
            yield xla_model.send_cpu_data_to_device(batch, self._device)
        xla_model.mark_step()

    def __len__(self) -> int:
        return len(self._loader)  # type: ignore[arg-type]

    def next(self) -> Any:
        raise TypeError("iterate the per-device loader (for batch in loader) instead of calling next()")


class ParallelLoader:
    """Wraps a host data loader for the given devices (one per process here: ``xla:0``)."""

    def __init__(
        self,
        loader: Iterable[Any],
        devices: Sequence[torch.device | str],
        batchdim: int = 0,
        batches_per_execution: int = 1,
        loader_prefetch_size: int = 8,
        device_prefetch_size: int = 4,
        host_to_device_transfer_threads: int = 1,
        input_sharding: Any = None,
        **kwargs: Any,
    ) -> None:
        if input_sharding is not None:
            from emulator.compat.gaps import NotEmulatedError

            raise NotEmulatedError("ParallelLoader(input_sharding=...)", "SPMD sharding")
        self._loader = loader
        self._devices = [torch.device(d) for d in devices]
        self._every = batches_per_execution

    def per_device_loader(self, device: torch.device | str) -> PerDeviceLoader:
        return PerDeviceLoader(self._loader, device, self._every)

    def per_device_samples(self) -> int:
        return len(self._loader) // max(len(self._devices), 1)  # type: ignore[arg-type]

    def close(self) -> None:
        """Nothing runs in the background to stop."""


class MpDeviceLoader:
    """``ParallelLoader(loader, [device]).per_device_loader(device)`` in one object."""

    def __init__(self, loader: Iterable[Any], device: torch.device | str, **kwargs: Any) -> None:
        self._loader = loader
        self._device = device
        self._kwargs = kwargs

    def __iter__(self) -> Iterator[Any]:
        parallel = ParallelLoader(self._loader, [self._device], **self._kwargs)
        return iter(parallel.per_device_loader(self._device))

    def __len__(self) -> int:
        return len(self._loader)  # type: ignore[arg-type]
