"""A costed step graph as its profile's schedule file: every op where the cost model put it.

The op spans are the cost model's own schedule (``GraphCost.op_spans``, docs/cost-model.md):
the profile re-estimates nothing, so the engines' busy time in a profile is the busy time the
execution reported to the daemon.
"""

from __future__ import annotations

from collections.abc import Sequence

from emulator.capture.ops import OpRecord, TensorMeta
from emulator.costmodel import CostOptions, GraphCost, classify
from emulator.costmodel.ops import DEFAULT_OPTIONS, hbm_read_write
from neurontools.contract.profile import CollectiveCall, GraphSchedule, OpTable


def _tensor_text(t: TensorMeta) -> str:
    return f"{t.dtype}[{','.join(str(d) for d in t.shape)}]"


def shapes_text(op: OpRecord) -> str:
    """``bfloat16[4,128] float32[128] -> bfloat16[4,128]``: the op's operands and results."""
    return f"{' '.join(_tensor_text(t) for t in op.inputs)} -> {' '.join(_tensor_text(t) for t in op.outputs)}"


def graph_schedule(
    name: str,
    graph_hash: str,
    ops: Sequence[OpRecord],
    cost: GraphCost,
    calls: Sequence[CollectiveCall] = (),
    options: CostOptions = DEFAULT_OPTIONS,
) -> GraphSchedule:
    """The schedule file of a graph: the ops that cost device time, with the cost model's spans,
    FLOPs, HBM bytes read and written and the rule that costed them; ``calls``: its collectives
    at their positions in the captured op list."""
    if len(ops) != cost.op_count:
        raise ValueError(f"{len(ops)} op records for {cost.op_count} costed ops")
    rows: dict[str, list] = {k: [] for k in ("name", "engine", "rule", "start", "end", "flops")}
    rows.update({k: [] for k in ("hbm_read", "hbm_write", "shapes", "index")})
    total_read = total_write = 0
    counted: set[int] = set()
    for part, (c, (start, end)) in enumerate(zip(cost.ops, cost.op_spans(), strict=True)):
        if c.seconds == 0:
            continue
        i = cost.owner(part)
        op = ops[i]
        read, write = hbm_read_write(op, classify(op), options, cost.on_chip(i)) if i not in counted else (0, 0)
        counted.add(i)
        total_read, total_write = total_read + read, total_write + write
        for key, value in (
            ("name", c.name),
            ("engine", c.engine.value),
            ("rule", f"{c.bound}/{c.kind.value}"),
            ("start", start),
            ("end", end),
            ("flops", c.flops),
            ("hbm_read", read),
            ("hbm_write", write),
            ("shapes", shapes_text(op)),
            ("index", i),
        ):
            rows[key].append(value)
    return GraphSchedule(
        hash=graph_hash,
        name=name,
        compute_seconds=cost.device_seconds,
        hbm_seconds=cost.hbm_seconds,
        busy=dict(cost.busy),
        flops=int(cost.flops),
        hbm_read_bytes=total_read,
        hbm_write_bytes=total_write,
        captured_ops=len(ops),
        ops=OpTable(**{k: tuple(v) for k, v in rows.items()}),
        collectives=tuple(calls),
        efficiency=cost.efficiency,
    )
