"""``torch_xla.utils.utils`` and ``torch_xla.test.test_utils``: the helpers the public samples import
(docs/run-your-script.md §Supported names). Plain host code in torch_xla too; the same here."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any


# -- torch_xla.utils.utils ----------------------------------------------------------------------
class SampleGenerator:
    """Yields ``data`` ``sample_count`` times: torch_xla's fake-data loader for benchmarks."""

    def __init__(self, data: Any, sample_count: int) -> None:
        self._data, self._sample_count, self._count = data, sample_count, 0

    def __iter__(self) -> Iterator[Any]:
        return SampleGenerator(self._data, self._sample_count)

    def __len__(self) -> int:
        return self._sample_count

    def __next__(self) -> Any:
        if self._count >= self._sample_count:
            raise StopIteration
        self._count += 1
        return self._data


def as_list(t: Any) -> list[Any]:
    return t if isinstance(t, list) else [t]


def getenv_as(name: str, to_type: Callable[[str], Any], defval: Any = None) -> Any:
    """The environment variable ``name`` converted by ``to_type`` (``bool``: 0/1, false/true)."""
    value = os.environ.get(name)
    if value is None:
        return defval
    if to_type is bool:
        return value.strip().lower() not in ("", "0", "false", "no", "off")
    return to_type(value)


# -- torch_xla.test.test_utils --------------------------------------------------------------------
def now(format: str = "%H:%M:%S") -> str:  # torch_xla's argument name
    return datetime.now().strftime(format)


def print_training_update(
    device: Any,
    step: int,
    loss: Any,
    rate: float,
    global_rate: float,
    epoch: int | None = None,
    summary_writer: Any = None,
) -> None:
    """One progress line, as torch_xla's (``summary_writer`` is not written)."""
    update = [
        "Training",
        f"Device={device}",
        f"Epoch={epoch}" if epoch is not None else None,
        f"Step={step}",
        f"Loss={_float(loss):.5f}",
        f"Rate={rate:.2f}",
        f"GlobalRate={global_rate:.2f}",
        f"Time={now()}",
    ]
    print("|", " ".join(u for u in update if u), flush=True)


def print_test_update(device: Any, accuracy: float, epoch: int | None = None, step: int | None = None) -> None:
    update = ["Test", f"Device={device}", f"Step={step}" if step is not None else None]
    update += [f"Epoch={epoch}" if epoch is not None else None, f"Accuracy={accuracy:.2f}", f"Time={now()}"]
    print("|", " ".join(u for u in update if u), flush=True)


def get_summary_writer(logdir: str | None) -> Any:
    """A TensorBoard ``SummaryWriter`` for ``logdir`` (None without one, or without tensorboard)."""
    if not logdir:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        print("torch_xla.test.test_utils: tensorboard is not installed; no summaries", file=sys.stderr)
        return None
    return SummaryWriter(log_dir=logdir)


def write_to_summary(
    summary_writer: Any, global_step: int | None = None, dict_to_write: dict[str, Any] | None = None, **_: Any
) -> None:
    if summary_writer is None:
        return
    for key, value in (dict_to_write or {}).items():
        summary_writer.add_scalar(key, _float(value), global_step)


def close_summary_writer(summary_writer: Any) -> None:
    if summary_writer is not None:
        summary_writer.close()


def _float(value: Any) -> float:
    return float(value.item() if hasattr(value, "item") else value)
