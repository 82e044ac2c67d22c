"""FLOPs of ATen's CPU flash-attention ops, which PyTorch's flop counter has no formula for: the
matmuls of the tiles the kernel computes (docs/cost-model.md §Flash attention).

The op is what the model-scale transformer's flash attention records (``emulator/parallel/models/
attention.py``). The kernel works on 128 x 128 tiles of the score matrix (one query tile fills the
128 partitions of SBUF); with ``is_causal`` it skips the tiles above the diagonal, which the mask
would empty (nki-library ``attention_cte.py``: "skip MM1/MM2 for upper triangle tiles"). Forward:
``S = Q K^T`` and ``O = P V``; backward (the kernel recomputes the scores): ``S``, ``dV = P^T dO``,
``dP = dO V^T``, ``dQ = dS K``, ``dK = dS^T Q``. 2 FLOPs per multiply-add.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.flop_counter import flop_registry, register_flop_formula

TILE = 128  # the kernel's query and key tile (SBUF partitions)
Shape = Sequence[int]  # what PyTorch's shape-only FLOP formulas receive for a tensor


def computed_share(queries: int, keys: int, causal: bool) -> float:
    """Share of the ``queries x keys`` score tiles the kernel computes: all of them, or with a causal
    mask those holding a score some query may see (query ``i`` sees keys ``<= i + keys - queries``)."""
    if not causal or queries <= 0 or keys <= 0:
        return 1.0
    q_tiles, k_tiles = math.ceil(queries / TILE), math.ceil(keys / TILE)
    offset = keys - queries
    seen = sum(min(k_tiles, max(0, (min(queries, (i + 1) * TILE) - 1 + offset) // TILE + 1)) for i in range(q_tiles))
    return seen / (q_tiles * k_tiles)


def attention_flops(query: Shape, key: Shape, value: Shape, causal: bool, backward: bool) -> int:
    """FLOPs of the kernel on ``[..., L, E]`` queries, ``[..., S, E]`` keys, ``[..., S, Ev]`` values."""
    batch = math.prod(query[:-2])
    length, e, s, ev = query[-2], query[-1], key[-2], value[-1]
    per_score = 6 * e + 4 * ev if backward else 2 * e + 2 * ev  # FLOPs per score: the GEMMs above
    return round(batch * length * s * per_score * computed_share(length, s, causal))


def _forward(
    query: Shape, key: Shape, value: Shape, dropout_p: float = 0.0, is_causal: bool = False, *_: Any, **__: Any
) -> int:
    return attention_flops(query, key, value, bool(is_causal), backward=False)


def _backward(
    grad_out: Shape, query: Shape, key: Shape, value: Shape, *rest: Any, **__: Any
) -> int:  # rest: out, logsumexp, dropout_p, is_causal
    causal = bool(rest[3]) if len(rest) > 3 else False
    return attention_flops(query, key, value, causal, backward=True)


def register() -> None:
    """Add the formulas to PyTorch's flop registry (once)."""
    aten = torch.ops.aten
    for packet, formula in (
        (aten._scaled_dot_product_flash_attention_for_cpu, _forward),
        (aten._scaled_dot_product_flash_attention_for_cpu_backward, _backward),
    ):
        if packet not in flop_registry:
            register_flop_formula(packet)(formula)


register()
