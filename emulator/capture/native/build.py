"""Compiling and loading the native device backend (``xla_backend.cpp``, docs/capture.md).

The extension is compiled once per source, PyTorch and Python version with PyTorch's own
``torch.utils.cpp_extension`` (a C++ compiler and ninja; about 30 s on a 2-vCPU machine) into
``$NEURON_EMULATOR_BUILD_DIR`` or ``~/.cache/neuron-emulator/native/<key>``; ``make setup``
does it ahead of time (``python -m emulator.capture.native.build``). Later processes import the
built library directly. Concurrent first builds are serialised by PyTorch's lock file in the
build directory.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

SOURCE = Path(__file__).with_name("xla_backend.cpp")
# torch.autocast's policy for device xla (docs/run-your-script.md §Autocast)
SOURCES = (SOURCE, Path(__file__).with_name("autocast_xla.cpp"))
NAME = "neuron_xla_backend"


def build_key() -> str:
    """What the compiled library depends on: the sources, PyTorch's and Python's versions."""
    import torch

    digest = hashlib.sha256(b"".join(source.read_bytes() for source in SOURCES))
    digest.update(torch.__version__.encode())
    digest.update(sys.version.encode())
    return digest.hexdigest()[:16]


def build_dir() -> Path:
    root = os.environ.get("NEURON_EMULATOR_BUILD_DIR", "").strip()
    base = Path(root) if root else Path.home() / ".cache" / "neuron-emulator" / "native"
    return base / build_key()


def _library(directory: Path) -> Path | None:
    found = sorted(directory.glob(f"{NAME}*.so"))
    return found[0] if found else None


def _import(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(NAME, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load(*, verbose: bool = False) -> ModuleType:
    """The extension module, compiled first if needed. Raises on a failed build."""
    import torch  # the library links against the loaded libtorch

    directory = build_dir()
    built = _library(directory)
    if built is not None:
        return _import(built)
    directory.mkdir(parents=True, exist_ok=True)
    from torch.utils.cpp_extension import load as cpp_load

    del torch
    return cpp_load(
        name=NAME,
        sources=[str(source) for source in SOURCES],
        build_directory=str(directory),
        extra_cflags=["-O2"],
        verbose=verbose,
    )


def failure_line(exc: BaseException) -> str:
    """One line for a failed build: the compiler's first error, else the exception's first line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower() and not line.startswith(("c++ ", "["))]
    return (errors or lines or [type(exc).__name__])[-1 if not errors else 0][:300]


def main() -> int:
    try:
        load(verbose="-v" in sys.argv[1:])
    except Exception as exc:  # a missing compiler, headers or ninja: say it in one line
        print(f"neuron-emulator: native device backend not built: {failure_line(exc)}", file=sys.stderr)
        return 1
    print(f"native device backend ready in {build_dir()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
