"""Producer -> consumer fusion (emulator/costmodel/fusion.py, docs/cost-model.md §Fusion): an
elementwise op takes the result of the device op before it on chip, so that operand's HBM read
is gone; the producer's write and the consumer's engine passes stay."""

from __future__ import annotations

import math

import pytest

from emulator.capture.ops import OpRecord, TensorMeta
from emulator.costmodel import cost_graph, cost_op
from emulator.costmodel.fusion import NOT_FUSED, fused_input, fused_inputs
from emulator.profile.graphs import graph_schedule

_SIZE = {"float32": 4, "bfloat16": 2, "bool": 1}


def t(*shape: int, dtype: str = "bfloat16") -> TensorMeta:
    return TensorMeta(tuple(shape), dtype, math.prod(shape) * _SIZE[dtype])


def op(name: str, ins: list[TensorMeta], outs: list[TensorMeta], flops: int = 0) -> OpRecord:
    return OpRecord(name, tuple(ins), tuple(outs), flops)


def scores_chain(heads: int = 4, seq: int = 1024, dim: int = 128) -> list[OpRecord]:
    """Plain attention's score chain: QK^T, a view, scale, causal mask, softmax, PV."""
    s = t(heads, seq, seq)
    return [
        op("aten.bmm", [t(heads, seq, dim), t(heads, dim, seq)], [s], 2 * heads * seq * seq * dim),
        op("aten.view", [s], [t(1, heads, seq, seq)]),
        op("aten.mul", [t(1, heads, seq, seq)], [t(1, heads, seq, seq)]),
        op("aten.masked_fill", [t(1, heads, seq, seq), t(seq, seq, dtype="bool")], [t(1, heads, seq, seq)]),
        op("aten._softmax", [t(1, heads, seq, seq)], [t(1, heads, seq, seq)]),
        op("aten.bmm", [s, t(heads, seq, dim)], [t(heads, seq, dim)], 2 * heads * seq * seq * dim),
    ]


def test_which_input_is_the_producers_result() -> None:
    chain = scores_chain()
    # a view is free and skipped; each elementwise op takes the op before it on chip; the mask
    # (another shape) and the matmul consumer (not elementwise) read HBM as before
    assert fused_inputs(chain) == (NOT_FUSED, NOT_FUSED, 0, 0, 0, NOT_FUSED)
    residual = op("aten.add", [t(512, 1024), t(512, 1024)], [t(512, 1024)])
    gemm = op("aten.mm", [t(512, 4096), t(4096, 1024)], [t(512, 1024)], 2 * 512 * 4096 * 1024)
    assert fused_input(gemm, residual) == 0  # one of the two same-shaped operands, once
    # another dtype or element count is not the producer's result
    assert (
        fused_input(gemm, op("aten.add", [t(512, 1024, dtype="float32")] * 2, [t(512, 1024, dtype="float32")]))
        == NOT_FUSED
    )
    assert fused_input(gemm, op("aten.gelu", [t(512, 2048)], [t(512, 2048)])) == NOT_FUSED
    # optimizer updates over parameter lists are not fused
    foreach = op("aten._foreach_add", [t(512, 1024)] * 6, [t(512, 1024)] * 3)
    assert fused_input(gemm, foreach) == NOT_FUSED
    # a copy (DMA) consumer is not elementwise
    assert fused_input(gemm, op("aten.clone", [t(512, 1024)], [t(512, 1024)])) == NOT_FUSED


def test_fusion_saves_the_consumers_read_only() -> None:
    chain = scores_chain()
    graph = cost_graph(chain, efficiency=1.0)
    alone = [cost_op(o) for o in chain]
    score_bytes = 4 * 1024 * 1024 * 2
    for i in (2, 3, 4):  # scale, mask, softmax: one score matrix less read from HBM each
        part = graph.ops[graph.owners.index(i)]
        assert alone[i].hbm_bytes - part.hbm_bytes == score_bytes
        assert part.compute_seconds == alone[i].compute_seconds  # the engine passes stay
    for i in (0, 5):  # the matmuls: unchanged (the producer still writes its result)
        assert graph.ops[graph.owners.index(i)].hbm_bytes == alone[i].hbm_bytes
    assert graph.hbm_bytes == sum(c.hbm_bytes for c in alone) - 3 * score_bytes
    # the scale was memory-bound: fused, it costs less device time; the graph is faster
    assert graph.ops[graph.owners.index(2)].seconds < alone[2].seconds
    assert graph.device_seconds < cost_graph(chain[:1], efficiency=1.0).device_seconds + sum(
        c.seconds for c in alone[1:]
    )


def test_profile_schedule_reports_the_fused_traffic() -> None:
    chain = scores_chain()
    graph = cost_graph(chain)
    sched = graph_schedule("g", "h", chain, graph)
    assert sched.hbm_read_bytes + sched.hbm_write_bytes == graph.hbm_bytes
    by_index = dict(zip(sched.ops.index, sched.ops.hbm_read, strict=True))
    assert by_index[2] == 0  # the scale reads nothing from HBM: its operand is the matmul's tile
    assert by_index[3] == 1024 * 1024  # the mask only (bool)


@pytest.mark.parametrize("heads", [1, 8])
def test_fused_graph_keeps_the_bounds(heads: int) -> None:
    graph = cost_graph(scores_chain(heads=heads, seq=512), efficiency=1.0)
    assert max(graph.busy.values()) <= graph.device_seconds * (1 + 1e-12)
    assert graph.device_seconds <= graph.serial_seconds * (1 + 1e-12)
    assert graph.device_seconds >= graph.hbm_seconds
