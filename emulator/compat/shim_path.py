"""The environment of ``neuron-emulator exec``: the emulator's torch_xla, torch_neuronx and
neuronx_distributed packages (``emulator/shims``) first on ``PYTHONPATH``, their ``bin``
(``neuron_parallel_compile``) and this Python's on ``PATH`` (docs/run-your-script.md). Outside
``exec`` the shims are on no path and never shadow a real torch_xla."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

import emulator

SHIMS = Path(emulator.__file__).resolve().parent / "shims"


def shim_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the shims first on ``PYTHONPATH`` and their ``bin`` (and this Python's) on ``PATH``."""
    out = dict(env)
    package_root = str(SHIMS.parent.parent)  # where `import emulator` resolves, for the shims' imports
    paths = [str(SHIMS), package_root]
    paths += [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p and p not in paths]
    out["PYTHONPATH"] = os.pathsep.join(paths)
    bins = [str(SHIMS / "bin"), str(Path(sys.executable).parent)]
    bins += [p for p in out.get("PATH", os.defpath).split(os.pathsep) if p and p not in bins]
    out["PATH"] = os.pathsep.join(bins)
    return out
