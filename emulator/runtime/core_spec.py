"""NeuronCore selection the way the Neuron runtime reads it (spec/trn1-hardware.md §6.2).

``NEURON_RT_VISIBLE_CORES`` takes a single id (``3``), an inclusive range (``3-6``), a comma list
(``3,4,5,6``) or a mix (``3-5,6``); the result must be contiguous and increasing. It wins over
``NEURON_RT_NUM_CORES`` (a count of free cores to grab, 0 = all). Under ``torchrun`` each local
rank takes one core. The daemon checks the ids against the instance; this module only parses.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass

_ITEM = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


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
            raise CoreSpecError(f"{name}={text!r}: {item.strip()!r} is not a core id or range like '2-5'")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise CoreSpecError(f"{name}={text!r}: range {first}-{last} goes backwards")
        ids.extend(range(first, last + 1))
    for prev, cur in itertools.pairwise(ids):
        if cur != prev + 1:
            raise CoreSpecError(
                f"{name}={text!r}: cores must be contiguous and increasing ({prev} is followed by {cur})"
            )
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
        if not local_rank_text.isdigit():
            raise CoreSpecError(f"LOCAL_RANK={local_rank_text!r} is not a non-negative integer")
        local_rank = int(local_rank_text)

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
        if not num.isdigit():
            raise CoreSpecError(f"NEURON_RT_NUM_CORES={num!r} is not a non-negative integer")
        if int(num) > 0:
            return CoreRequest(num_cores=int(num), origin=f"NEURON_RT_NUM_CORES={num}")
    return CoreRequest()
