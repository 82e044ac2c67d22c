"""Honest gaps: a torch_xla / torch_neuronx / neuronx-distributed name the emulator does not
provide raises :class:`NotEmulatedError` naming it, instead of doing nothing (docs/run-your-script.md).

A shim module ends with ``__getattr__ = not_emulated(__name__)``: Python calls it for names the
module does not define. Private and dunder names (``__path__``, ``_foo``) stay ordinary
``AttributeError`` s, which is what ``hasattr``, ``inspect`` and pickling expect of them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import NoReturn

DOCS = "docs/run-your-script.md"


class NotEmulatedError(NotImplementedError):
    """A name of torch_xla / torch_neuronx / neuronx-distributed that neuron-emulator does not provide."""

    def __init__(self, qualified: str, why: str = "") -> None:
        self.qualified = qualified
        reason = f": {why}" if why else ""
        super().__init__(f"{qualified} is not emulated by neuron-emulator{reason} (supported names: {DOCS})")


def not_emulated(module: str) -> Callable[[str], NoReturn]:
    """A module-level ``__getattr__`` that raises for every public name the module lacks."""

    def missing(name: str) -> NoReturn:
        if name.startswith("_"):
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        raise NotEmulatedError(f"{module}.{name}")

    return missing


def package_getattr(package: str, submodules: tuple[str, ...]) -> Callable[[str], ModuleType]:
    """A package's ``__getattr__``: its ``submodules`` are imported on first access (as
    ``torch_xla.runtime`` after ``import torch_xla``), other public names are not emulated."""
    missing = not_emulated(package)

    def attribute(name: str) -> ModuleType:
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")
        missing(name)

    return attribute


def refuse(qualified: str, why: str = "") -> Callable[..., NoReturn]:
    """A callable that exists (so imports work) but raises when called: for names a script may
    import unconditionally yet rarely calls (``torch_neuronx.trace``)."""

    def call(*args: object, **kwargs: object) -> NoReturn:
        raise NotEmulatedError(qualified, why)

    call.__name__ = qualified.rsplit(".", 1)[-1]
    call.__qualname__ = call.__name__
    return call
