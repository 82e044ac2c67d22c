"""The top level of ``torch_xla`` (2.x): ``torch_xla.device()``, ``sync()``, ``launch()``,
``compile()``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from emulator.compat import xla_model
from emulator.compat.spawn import launch

# Versions the packages report: the PyTorch underneath, marked as the emulator's (PEP 440 local
# version), so a script that prints or compares versions sees what it runs on.
__version__ = f"{torch.__version__.split('+')[0]}+neuron.emulated"
NEURONX_VERSION = __version__


def device(index: int | None = None) -> torch.device:
    return xla_model.xla_device(index)


def devices() -> list[torch.device]:
    return [xla_model.xla_device()]


def sync(wait: bool = False, reset_scope: bool = True) -> None:
    xla_model.mark_step(wait)


def compile(  # torch_xla's name, as the builtin's
    f: Callable[..., Any] | None = None,
    full_graph: bool = False,
    name: str | None = None,
    num_different_graphs_allowed: int | None = None,
) -> Any:
    """``torch_xla.compile(f)``: ``f`` with the pending ops cut into a graph before it runs and its
    own ops cut into one (or more) after it returns — a ``mark_step`` each side, which is what
    torch_xla's does to the lazy tensors; usable as a decorator with or without arguments. The
    emulator keeps no graph-count limit (``full_graph``, ``num_different_graphs_allowed``)."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def compiled(*args: Any, **kwargs: Any) -> Any:
            xla_model.mark_step()
            try:
                return fn(*args, **kwargs)
            finally:
                xla_model.mark_step()

        return compiled

    return wrap if f is None else wrap(f)


__all__ = ["NEURONX_VERSION", "__version__", "compile", "device", "devices", "launch", "sync"]
