"""Where this process stands in the job: its rank, the world's size, its node.

Ranks and sizes come from the environment torchrun sets (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``), which ``xmp.spawn`` sets for its children too
(:mod:`emulator.compat.spawn`). A plain ``python train.py`` is rank 0 of a world of one.
torchrun numbers ranks node by node, so a rank's node is ``rank // LOCAL_WORLD_SIZE``
(:func:`emulator.runtime.placement.node_of`, which places each rank's NeuronCore for the collectives).
"""

from __future__ import annotations

import os


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    return int(text) if text.isdigit() else default


def global_rank() -> int:
    return _env_int("RANK", 0)


def world_size() -> int:
    return max(1, _env_int("WORLD_SIZE", 1))


def local_rank() -> int:
    return _env_int("LOCAL_RANK", 0)


def local_world_size() -> int:
    return max(1, _env_int("LOCAL_WORLD_SIZE", world_size()))
