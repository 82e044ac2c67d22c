"""NeuronCore selection the way the Neuron runtime reads it (docs/reference/trn1-runtime.md §NeuronCore selection).

``NEURON_RT_VISIBLE_CORES`` takes a single id (``3``), an inclusive range (``3-6``), a comma list
(``3,4,5,6``) or a mix (``3-5,6``); the result must be contiguous and increasing. It wins over
``NEURON_RT_NUM_CORES`` (a count of free cores to grab, 0 = all). Under ``torchrun`` each local
rank takes one core. The daemon checks the ids against the instance; this module only parses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_ITEM = re.compile(r"^\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*)?$")
# No instance has anywhere near this many NeuronCores; the daemon checks ids against the real
# count. The bound keeps a mistyped range (0-10000000000) from being spelled out (docs/fuzzing.md).
MAX_CORE_ID = 65535
MAX_DIGITS = 9


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:40]) + "..."


def _count(text: str) -> int | None:
    """A non-negative decimal integer in ASCII digits, or None."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= MAX_DIGITS else None


class CoreSpecError(ValueError):
    """A core selection that the runtime would reject."""


def parse_core_ids(text: str, *, name: str = "NEURON_RT_VISIBLE_CORES") -> list[int]:
    """Parse ``3``, ``3-6``, ``3,4,5`` or ``3-5,6`` into a contiguous increasing list of ids."""
    if not text.strip():
        raise CoreSpecError(f"{name} is empty: expected core ids like '0', '0-3' or '0,1,2'")
    ids: list[int] = []
    for item in text.split(","):
        match = _ITEM.match(item)
        if not match:
            raise CoreSpecError(f"{name}={_shown(text)}: {_shown(item.strip())} is not a core id or range like '2-5'")
        bounds = [_count(g) for g in match.groups() if g is not None]
        if any(b is None or b > MAX_CORE_ID for b in bounds):
            raise CoreSpecError(f"{name}={_shown(text)}: core id out of range (0-{MAX_CORE_ID})")
        first, last = bounds[0], bounds[-1]
        assert first is not None and last is not None
        if last < first:
            raise CoreSpecError(f"{name}={_shown(text)}: range {first}-{last} goes backwards")
        if ids and first != ids[-1] + 1:
            raise CoreSpecError(
                f"{name}={_shown(text)}: cores must be contiguous and increasing ({ids[-1]} is followed by {first})"
            )
        ids.extend(range(first, last + 1))
    return ids


def format_core_ids(ids: list[int] | tuple[int, ...]) -> str:
    """``[3, 4, 5]`` -> ``nc3-nc5`` as the runtime's allocation messages write it (``nc1-nc1`` for
    one core); separate runs are joined with commas (``nc0-nc1,nc6-nc6``)."""
    if not ids:
        return "none"
    runs: list[list[int]] = []
    for core in sorted(ids):
        if runs and core == runs[-1][-1] + 1:
            runs[-1].append(core)
        else:
            runs.append([core])
    return ",".join(f"nc{run[0]}-nc{run[-1]}" for run in runs)


@dataclass(frozen=True)
class CoreRequest:
    """What a process asks for: explicit ids, a count of free cores, or (both None) every core."""

    visible_cores: tuple[int, ...] | None = None
    num_cores: int | None = None
    origin: str = "default: all NeuronCores"

    def to_dict(self) -> dict[str, object]:
        return {
            "visible_cores": None if self.visible_cores is None else list(self.visible_cores),
            "num_cores": self.num_cores,
            "origin": self.origin,
        }


def request_from_env(env: Mapping[str, str]) -> CoreRequest:
    """The core request of a process started with environment ``env``."""
    visible = env.get("NEURON_RT_VISIBLE_CORES", "").strip()
    local_rank_text = env.get("LOCAL_RANK", "").strip()
    local_rank: int | None = None
    if local_rank_text:
        local_rank = _count(local_rank_text)
        if local_rank is None:
            raise CoreSpecError(f"LOCAL_RANK={_shown(local_rank_text)} is not a non-negative integer")

    if visible:
        ids = parse_core_ids(visible)
        if local_rank is not None and len(ids) > 1:
            # torchrun with a visible range for the whole job: rank r takes the r-th core of it.
            if local_rank >= len(ids):
                raise CoreSpecError(
                    f"LOCAL_RANK={local_rank} but NEURON_RT_VISIBLE_CORES={visible!r} has only {len(ids)} cores"
                )
            return CoreRequest(
                visible_cores=(ids[local_rank],),
                origin=f"NEURON_RT_VISIBLE_CORES={visible} (local rank {local_rank})",
            )
        return CoreRequest(visible_cores=tuple(ids), origin=f"NEURON_RT_VISIBLE_CORES={visible}")

    if local_rank is not None:
        return CoreRequest(visible_cores=(local_rank,), origin=f"torchrun local rank {local_rank}")

    num = env.get("NEURON_RT_NUM_CORES", "").strip()
    if num:
        count = _count(num)
        if count is None:
            raise CoreSpecError(f"NEURON_RT_NUM_CORES={_shown(num)} is not a non-negative integer")
        if count > 0:
            return CoreRequest(num_cores=count, origin=f"NEURON_RT_NUM_CORES={num}")
    return CoreRequest()
