"""torch-xla's tensor serialization (``torch_xla.utils.serialization``), also what NxD's
checkpoints write with ``use_xser=True`` (docs/run-your-script.md §Supported names).

``save(data, path)`` writes ``path`` holding ``data`` with every tensor replaced by a reference, and
each tensor — moved to the host — as its own file ``<path>.tensors/tensor_<n>.pt``, so one large
state never has to be serialised in one piece. ``load(path)`` puts the tensors back. ``save``
writes on the master ordinal only unless ``master_only=False`` (each host's first process, or the
job's first with ``global_master=True``), as torch-xla's does. The layout is torch-xla's; the
references are this module's own (plain dicts), so files written by a real torch-xla are not read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_map

from emulator.compat import xla_model as xm

_KEY = "_xser_tensor"


def _is_reference(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {_KEY}


def write(data: Any, path: str | os.PathLike[str]) -> None:
    """Write ``data`` in the format (no rank check)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tensors = target.with_name(target.name + ".tensors")
    tensors.mkdir(exist_ok=True)
    count = 0

    def reference(value: Any) -> Any:
        nonlocal count
        if not isinstance(value, torch.Tensor):
            return value
        torch.save(value, tensors / f"tensor_{count}.pt")
        count += 1
        return {_KEY: count - 1}

    torch.save(tree_map(reference, xm._to_cpu(data)), target)


def save(data: Any, path: str | os.PathLike[str], master_only: bool = True, global_master: bool = False) -> None:
    if not master_only or xm.is_master_ordinal(local=not global_master):
        write(data, path)
    xm.rendezvous("xser.save")


def load(path: str | os.PathLike[str]) -> Any:
    """``data`` as saved, its tensors on the host."""
    source = Path(path)
    data = torch.load(source, map_location="cpu", weights_only=False)
    tensors = source.with_name(source.name + ".tensors")

    def resolve(value: Any) -> Any:
        if _is_reference(value):
            return torch.load(tensors / f"tensor_{value[_KEY]}.pt", map_location="cpu", weights_only=False)
        return value

    return tree_map(resolve, data, is_leaf=_is_reference)
