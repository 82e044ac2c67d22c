"""The flash-attention kernel's cost (docs/cost-model.md §Flash attention): FLOPs of the tiles it
computes (a causal mask skips those above the diagonal), its work on TensorE, VectorE and ScalarE,
and HBM traffic without the score matrix."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from emulator.capture.attention_flops import attention_flops, computed_share
from emulator.capture.ops import OpRecord, TensorMeta
from emulator.costmodel import CostOptions, cost_graph
from emulator.costmodel.engines import Engine
from emulator.costmodel.ops import attention_work
from emulator.costmodel.parts import cost_op_parts
from emulator.hardware.neuroncore_v2 import NEURONCORE_V2

B, H, S, D = 1, 4, 1024, 128
OPTIONS = CostOptions()


def test_a_causal_mask_leaves_the_tiles_on_and_below_the_diagonal() -> None:
    assert computed_share(4096, 4096, causal=True) == 528 / 1024  # 32 x 33 / 2 of 32 x 32 tiles
    assert computed_share(4096, 4096, causal=False) == 1.0
    assert computed_share(128, 128, causal=True) == 1.0
    assert computed_share(128, 4096, causal=True) == 1.0  # the last queries see every key


def test_pytorch_counts_the_kernels_flops_on_the_cpu_op() -> None:
    q, k, v = (torch.randn(B, H, 256, 32) for _ in range(3))
    counts = {}
    for causal in (False, True):
        with FlopCounterMode(display=False) as counter:
            torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)
        counts[causal] = counter.get_total_flops()
    assert counts[False] == 4 * B * H * 256 * 256 * 32  # Q K^T and P V
    assert counts[True] == round(counts[False] * computed_share(256, 256, True))


def _op(causal: bool, backward: bool = False) -> OpRecord:
    t = TensorMeta((B, H, S, D), "bfloat16", B * H * S * D * 2)
    lse = TensorMeta((B, H, S), "float32", B * H * S * 4)
    flops = attention_flops(t.shape, t.shape, t.shape, causal, backward)
    if backward:
        name = "aten._scaled_dot_product_flash_attention_for_cpu_backward"
        return OpRecord(name, (t, t, t, t, t, lse), (t, t, t), flops)
    return OpRecord("aten._scaled_dot_product_flash_attention_for_cpu", (t, t, t), (t, lse), flops)


@pytest.mark.parametrize("backward", [False, True])
def test_the_kernel_works_on_three_engines_and_skips_masked_tiles(backward: bool) -> None:
    full, causal = (attention_work(_op(c, backward), OPTIONS, NEURONCORE_V2) for c in (False, True))
    assert full is not None and causal is not None
    share = computed_share(S, S, True)
    for field in ("tensor_seconds", "vector_seconds", "scalar_seconds"):
        assert getattr(causal, field) == pytest.approx(getattr(full, field) * share)
    assert full.scores == B * H * S * S
    gemms = 5 if backward else 2  # and one transpose through the array each way
    assert full.flops == gemms * 2 * B * H * S * S * D
    parts = cost_op_parts(_op(True, backward), OPTIONS, NEURONCORE_V2)
    assert [p.engine for p in parts] == [Engine.TENSOR, Engine.VECTOR, Engine.SCALAR]
    assert parts[0].hbm_bytes == sum(t.nbytes for t in (*_op(True, backward).inputs, *_op(True, backward).outputs))
    assert parts[1].hbm_bytes == parts[2].hbm_bytes == 0  # the scores stay in SBUF/PSUM
    graph = cost_graph([_op(True, backward)], OPTIONS)
    assert graph.op_count == graph.device_op_count == 1
    for part in parts:  # each engine busy with its part; the three overlap tile by tile
        assert graph.busy[part.engine.value] == pytest.approx(part.seconds / graph.efficiency)
    assert graph.device_seconds < sum(p.seconds for p in parts) / graph.efficiency
