"""What of a captured op each engine runs: one part for most ops, three for a fused attention
kernel, whose TensorE, VectorE and ScalarE work on a tile of scores while the others work on the
next (docs/cost-model.md §Flash attention). The graph model (``graph.py``) schedules parts."""

from __future__ import annotations

import dataclasses
import math

from emulator.capture.ops import OpRecord
from emulator.costmodel.dtypes import CostOptions
from emulator.costmodel.engines import Engine, OpKind, classify
from emulator.costmodel.fusion import NOT_FUSED
from emulator.costmodel.ops import OpCost, attention_work, cost_op, fixed_overhead_seconds, tile_elements
from emulator.hardware.neuroncore_v2 import NeuronCoreV2Spec


def cost_op_parts(
    op: OpRecord, options: CostOptions, core: NeuronCoreV2Spec, on_chip: int = NOT_FUSED
) -> tuple[OpCost, ...]:
    """The op's cost on each engine it uses, the part holding its HBM traffic and FLOPs first
    (input ``on_chip``: taken from the op before it, ``fusion.py``)."""
    main = cost_op(op, options, core, on_chip)
    if classify(op).kind is not OpKind.ATTENTION:
        return (main,)
    work = attention_work(op, options, core)
    if work is None:
        return (main,)
    tiles = max(1, math.ceil(work.scores / tile_elements(core)))
    parts = [dataclasses.replace(main, tiles=tiles)]
    for engine, seconds in ((Engine.VECTOR, work.vector_seconds), (Engine.SCALAR, work.scalar_seconds)):
        if seconds > 0:
            overhead = fixed_overhead_seconds(engine, core)
            parts.append(
                OpCost(main.name, engine, OpKind.ATTENTION, overhead + seconds, overhead, seconds, 0.0, 0, 0, tiles)
            )
    return tuple(parts)
