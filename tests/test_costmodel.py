"""Cost model: op classification, per-op time, dtypes, graph overlap, collectives, compile."""

from __future__ import annotations

import dataclasses
import math

import pytest

from emulator.capture.ops import OpRecord, TensorMeta
from emulator.costmodel import (
    OP_TABLE,
    CostOptions,
    Engine,
    OpKind,
    classify,
    classify_name,
    compile_cost,
    cost_graph,
    cost_group_collective,
    cost_op,
    links_for,
    matmul_efficiency,
    normalize_op_name,
    options_from_env,
    runtime_model_code_overhead_bytes,
    unknown_op_names,
)
from emulator.costmodel.engines import _merge
from emulator.costmodel.graph import schedule
from emulator.costmodel.ops import dma_bandwidth, fixed_overhead_seconds, hbm_stream_bandwidth
from emulator.hardware import (
    NCCOM_CALIBRATION,
    NEURONCORE_V2,
    TRAINIUM1,
    TRN1_2XLARGE,
    TRN1_32XLARGE,
    TRN1N_32XLARGE,
)

_SIZE = {"float32": 4, "bfloat16": 2, "float16": 2, "int64": 8, "int32": 4, "bool": 1, "float64": 8}
BF16_ALL = CostOptions(auto_cast="all", auto_cast_type="bf16")


def t(*shape: int, dtype: str = "float32") -> TensorMeta:
    return TensorMeta(tuple(shape), dtype, math.prod(shape) * _SIZE[dtype])


def op(name: str, ins: list[TensorMeta], outs: list[TensorMeta], flops: int = 0) -> OpRecord:
    return OpRecord(name, tuple(ins), tuple(outs), flops)


def mm(m: int, k: int, n: int, dtype: str = "bfloat16") -> OpRecord:
    return op("aten.mm", [t(m, k, dtype=dtype), t(k, n, dtype=dtype)], [t(m, n, dtype=dtype)], 2 * m * k * n)


def binary(name: str, n: int, dtype: str = "float32") -> OpRecord:
    return op(name, [t(n, dtype=dtype), t(n, dtype=dtype)], [t(n, dtype=dtype)])


def step_ops(layers: int = 12, tokens: int = 2048, hidden: int = 1024, heads: int = 16) -> list[OpRecord]:
    """A transformer micro-step as ops (forward, backward, AdamW), of every kind the cost model
    schedules: matmuls, attention scores, softmax, GELU, norms, residual adds and free views."""
    h, f, seq = hidden, 4 * hidden, 128
    bf = "bfloat16"

    def unary(name: str, *shape: int) -> OpRecord:
        return op(name, [t(*shape, dtype=bf)], [t(*shape, dtype=bf)])

    batch, d = tokens // seq * heads, h // heads
    scores = (batch, seq, seq)
    qk = op(
        "aten.bmm",
        [t(batch, seq, d, dtype=bf), t(batch, d, seq, dtype=bf)],
        [t(*scores, dtype=bf)],
        2 * batch * seq * d * seq,
    )
    pv = op(
        "aten.bmm",
        [t(*scores, dtype=bf), t(batch, seq, d, dtype=bf)],
        [t(batch, seq, d, dtype=bf)],
        2 * batch * seq * seq * d,
    )
    layer = [
        unary("aten.native_layer_norm", tokens, h),
        mm(tokens, h, 3 * h),
        unary("aten.view", tokens, 3 * h),
        qk,
        unary("aten._softmax", *scores),
        pv,
        mm(tokens, h, h),
        binary("aten.add", tokens * h, bf),
        unary("aten.native_layer_norm", tokens, h),
        mm(tokens, h, f),
        unary("aten.gelu", tokens, f),
        mm(tokens, f, h),
        binary("aten.add", tokens * h, bf),
    ]
    backward = [
        *(mm(tokens, n, k) for k, n in ((h, f), (f, h), (h, h), (h, 3 * h))),
        *(mm(k, tokens, n) for k, n in ((h, f), (f, h), (h, h), (h, 3 * h))),
        unary("aten.gelu_backward", tokens, f),
        unary("aten._softmax_backward_data", *scores),
        unary("aten.native_layer_norm_backward", tokens, h),
        unary("aten.native_layer_norm_backward", tokens, h),
    ]
    params = 12 * h * h
    adamw = op("aten._fused_adamw_", [t(params)] * 4, [t(params)] * 3)
    return [*layer * layers, *backward * layers, *[adamw] * layers]


# --- classification --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "engine"),
    [
        ("aten.mm", Engine.TENSOR),
        ("aten.addmm.default", Engine.TENSOR),
        ("aten::bmm", Engine.TENSOR),
        ("aten.convolution_backward", Engine.TENSOR),
        ("aten._scaled_dot_product_flash_attention_for_cpu", Engine.TENSOR),
        ("aten.add_.Tensor", Engine.VECTOR),
        ("aten.sum.dim_IntList", Engine.VECTOR),
        ("aten.native_layer_norm_backward", Engine.VECTOR),
        ("aten._softmax", Engine.VECTOR),
        ("aten.where.self", Engine.VECTOR),
        ("aten._foreach_addcdiv_.ScalarList", Engine.VECTOR),
        ("aten._fused_adamw_", Engine.VECTOR),
        ("aten.gelu", Engine.SCALAR),
        ("aten.relu", Engine.SCALAR),
        ("aten.rsqrt", Engine.SCALAR),
        ("aten.exp", Engine.SCALAR),
        ("aten.embedding", Engine.GPSIMD),
        ("aten.embedding_dense_backward", Engine.GPSIMD),
        ("aten.nll_loss_forward", Engine.GPSIMD),
        ("aten.topk", Engine.GPSIMD),
        ("aten.bernoulli_.float", Engine.GPSIMD),
        ("aten.clone", Engine.DMA),
        ("aten.cat", Engine.DMA),
        ("aten._local_scalar_dense", Engine.DMA),
        ("aten.view", Engine.NONE),
        ("profiler._record_function_exit._RecordFunction", Engine.NONE),
    ],
)
def test_classification(name: str, engine: Engine) -> None:
    assert classify_name(name).engine is engine
    assert classify_name(name).known


def test_every_engine_has_ops_in_the_one_table() -> None:
    engines = {cls.engine for cls in OP_TABLE.values()}
    assert engines == set(Engine)
    with pytest.raises(ValueError, match="classified twice"):
        _merge([{"add": OP_TABLE["add"]}, {"add": OP_TABLE["mul"]}])


def test_normalize_op_name() -> None:
    assert normalize_op_name("aten.add_.Tensor") == "add"
    assert normalize_op_name("aten::_foreach_add_") == "_foreach_add"
    assert normalize_op_name("mm") == "mm"
    assert normalize_op_name("aten.__and__.Tensor") == "__and__"
    assert normalize_op_name("profiler._record_function_exit._RecordFunction") == "profiler._record_function_exit"


VIEWS = "view _unsafe_view reshape t transpose permute expand slice select unsqueeze squeeze as_strided detach alias"


@pytest.mark.parametrize("name", [*VIEWS.split(), "split", "empty_like", "lift_fresh"])
def test_view_family_is_free(name: str) -> None:
    cost = cost_op(op(f"aten.{name}", [t(1024, 1024)], [t(1024, 1024)]))
    assert (cost.seconds, cost.hbm_bytes, cost.engine, cost.bound) == (0.0, 0, Engine.NONE, "free")


def test_copy_that_changes_dtype_is_a_vector_cast() -> None:
    to_bf16 = op("aten._to_copy", [t(4096)], [t(4096, dtype="bfloat16")])
    same = op("aten._to_copy", [t(4096)], [t(4096)])
    copy_into_bf16 = op("aten.copy_", [t(4096, dtype="bfloat16"), t(4096)], [t(4096, dtype="bfloat16")])
    assert classify(to_bf16).engine is Engine.VECTOR
    assert classify(copy_into_bf16).engine is Engine.VECTOR
    assert classify(same).engine is Engine.DMA


def test_unknown_ops_use_the_vector_default_and_are_listed() -> None:
    ops = [op("aten.frobnicate", [t(1 << 20)], [t(1 << 20)]), binary("aten.add", 1 << 20)]
    cls = classify(ops[0])
    assert (cls.engine, cls.kind, cls.known) == (Engine.VECTOR, OpKind.STREAM, False)
    assert unknown_op_names(ops) == ("frobnicate",)
    graph = cost_graph(ops)
    assert graph.unknown_ops == ("frobnicate",)
    assert cost_op(ops[0]).seconds == pytest.approx(cost_op(op("aten.neg", [t(1 << 20)], [t(1 << 20)])).seconds)


def test_real_training_step_ops_are_all_classified() -> None:
    """Capture the ATen ops of a small real training step (transformer, conv, AdamW, SDPA)."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: set[str] = set()

    class Names(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.add(str(func))
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, activation="gelu")
    emb, head = torch.nn.Embedding(50, 32), torch.nn.Linear(32, 50)
    conv = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.MaxPool2d(2)
    )
    params = [*layer.parameters(), *emb.parameters(), *head.parameters(), *conv.parameters()]
    for kwargs in ({"foreach": True}, {"foreach": False}, {"fused": True}):
        opt = torch.optim.AdamW(params, lr=1e-3, **kwargs)
        with Names():
            ids = torch.randint(0, 50, (2, 8))
            logits = head(layer(emb(ids)))
            loss = torch.nn.functional.cross_entropy(logits.view(-1, 50), ids.view(-1))
            loss = loss + conv(torch.randn(2, 3, 8, 8)).sum()
            q = torch.randn(2, 2, 8, 8, requires_grad=True)
            loss = loss + torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            opt.zero_grad()
            loss.item()
    unknown = sorted({n for n in seen if not classify_name(n).known})
    assert not unknown, f"ops missing from the classification table: {unknown}"


# --- per-op time --------------------------------------------------------------------------------------


def test_tiny_ops_are_dominated_by_fixed_overhead() -> None:
    add = cost_op(binary("aten.add", 4))
    assert add.bound == "overhead"
    access = NEURONCORE_V2.on_chip.access_fixed_cycles.value / NEURONCORE_V2.on_chip.port_clock.base
    assert add.overhead_seconds == pytest.approx(access + 100 / 1.12e9)
    copy = cost_op(op("aten.clone", [t(4)], [t(4)]))
    assert copy.bound == "overhead"
    assert copy.seconds == pytest.approx(NEURONCORE_V2.dma.fixed_cost.base, rel=1e-3)
    assert cost_op(mm(4, 4, 4)).bound == "overhead"
    for engine in (Engine.TENSOR, Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD, Engine.DMA):
        assert fixed_overhead_seconds(engine) > 0
    assert fixed_overhead_seconds(Engine.NONE) == 0


def test_huge_elementwise_op_is_hbm_bound() -> None:
    n = 1 << 26
    cost = cost_op(binary("aten.add", n))
    assert cost.bound == "memory"
    assert cost.hbm_bytes == 3 * 4 * n
    assert cost.seconds == pytest.approx(cost.overhead_seconds + 3 * 4 * n / hbm_stream_bandwidth())
    assert hbm_stream_bandwidth() <= NEURONCORE_V2.hbm_bandwidth.base


def test_vector_cycles_follow_one_input_n_two_input_2n() -> None:
    n = 1 << 22
    unary = cost_op(op("aten.neg", [t(n)], [t(n)]))
    two = cost_op(binary("aten.mul", n))
    assert two.compute_seconds == pytest.approx(2 * unary.compute_seconds)
    assert unary.compute_seconds == pytest.approx(n / (128 * 1.12e9))
    act = cost_op(op("aten.gelu", [t(n)], [t(n)]))
    assert act.engine is Engine.SCALAR and act.compute_seconds == pytest.approx(n / (128 * 1.4e9))


def test_big_bf16_matmul_is_compute_bound_near_peak() -> None:
    n = 4096
    cost = cost_op(mm(n, n, n))
    assert cost.bound == "compute"
    achieved = 2 * n**3 / cost.seconds
    assert 0.99 * 95e12 < achieved <= 95e12
    assert cost.flops == 2 * n**3


def test_fp32_matmul_is_four_times_bf16_and_auto_cast_restores_it() -> None:
    bf16, fp32 = cost_op(mm(4096, 4096, 4096)), cost_op(mm(4096, 4096, 4096, "float32"))
    assert fp32.compute_seconds / bf16.compute_seconds == pytest.approx(4.0)
    cast = cost_op(mm(4096, 4096, 4096, "float32"), CostOptions(auto_cast="matmult"))
    assert cast.compute_seconds == pytest.approx(bf16.compute_seconds)
    assert cast.hbm_bytes == fp32.hbm_bytes  # matmult casts inside the core: FP32 stays in HBM
    tf32 = cost_op(mm(4096, 4096, 4096, "float32"), CostOptions(auto_cast="all", auto_cast_type="tf32"))
    assert tf32.compute_seconds == pytest.approx(bf16.compute_seconds)
    assert tf32.hbm_bytes == fp32.hbm_bytes  # tf32 keeps 4-byte storage


def test_auto_cast_all_shrinks_bytes_matmult_does_not() -> None:
    add = binary("aten.add", 1 << 24)
    none, matmult, every = (cost_op(add, CostOptions(auto_cast=m)) for m in ("none", "matmult", "all"))
    assert matmult.hbm_bytes == none.hbm_bytes
    assert every.hbm_bytes == none.hbm_bytes // 2
    assert every.seconds < none.seconds
    assert every.compute_seconds == none.compute_seconds  # VectorE computes in FP32 either way
    fp8 = cost_op(add, CostOptions(auto_cast="all", auto_cast_type="fp8_e4m3"))
    assert fp8.hbm_bytes == none.hbm_bytes // 4


def test_stochastic_rounding_costs_nothing() -> None:
    ops = step_ops()[:200]
    sr = cost_graph(ops, dataclasses.replace(BF16_ALL, stochastic_rounding=True))
    assert sr.device_seconds == cost_graph(ops, BF16_ALL).device_seconds


def test_int64_is_narrowed_on_the_device() -> None:
    cost = cost_op(op("aten.add", [t(1024, dtype="int64"), t(1024, dtype="int64")], [t(1024, dtype="int64")]))
    assert cost.hbm_bytes == 3 * 4 * 1024


@pytest.mark.parametrize(
    ("dims", "expected"),
    [
        ((4096, 4096, 4096), 1.0),
        ((2048, 1024, 1024), 1.0),
        ((128, 64, 128), 0.5),  # contraction of 64 fills half the 128 rows
        ((100, 100, 100), (100 * 100 * 100 / 128**2) / (128 * 100 / 128 * 1)),  # padded to one 128 tile
        ((1, 1024, 1024), 1 / 64),  # matrix-vector: the 64-cycle initiation floor
    ],
)
def test_matmul_efficiency(dims: tuple[int, int, int], expected: float) -> None:
    assert matmul_efficiency(*dims) == pytest.approx(expected)


def test_small_odd_matmul_is_slower_than_its_flops_suggest() -> None:
    cost = cost_op(mm(100, 100, 100))
    assert cost.compute_seconds > 2 * 100**3 / 95e12 * 1.5


def test_linear_bmm_conv_and_attention_flops() -> None:
    linear = op("aten.linear", [t(8, 16, 64, dtype="bfloat16"), t(32, 64, dtype="bfloat16")], [t(8, 16, 32)])
    assert cost_op(linear).flops == 2 * 8 * 16 * 64 * 32
    bmm = op("aten.bmm", [t(4, 128, 64), t(4, 64, 256)], [t(4, 128, 256)])
    assert cost_op(bmm).flops == 2 * 4 * 128 * 64 * 256
    conv = op("aten.convolution", [t(2, 3, 10, 10), t(8, 3, 3, 3), t(8)], [t(2, 8, 8, 8)])
    assert cost_op(conv).flops == 2 * (2 * 8 * 8) * (3 * 3 * 3) * 8
    grads = op(
        "aten.convolution_backward", [t(2, 8, 8, 8), t(2, 3, 10, 10), t(8, 3, 3, 3)], [t(2, 3, 10, 10), t(8, 3, 3, 3)]
    )
    assert cost_op(grads).flops == 2 * cost_op(conv).flops
    q = t(2, 4, 256, 64, dtype="bfloat16")
    sdpa = cost_op(op("aten._scaled_dot_product_flash_attention_for_cpu", [q, q, q], [q]))
    assert sdpa.engine is Engine.TENSOR and sdpa.flops == 4 * 8 * 256 * 256 * 64
    bwd = cost_op(op("aten._scaled_dot_product_flash_attention_for_cpu_backward", [q, q, q, q, q], [q, q, q]))
    assert bwd.flops == pytest.approx(2.5 * sdpa.flops)
    recorded = op("aten.mm", [t(64, 64), t(64, 64)], [t(64, 64)], flops=12345)
    assert cost_op(recorded).flops == 12345  # PyTorch's count wins when present


def test_gather_reads_only_the_indexed_rows() -> None:
    table, ids = t(30522, 1024, dtype="bfloat16"), t(16, 128, dtype="int64")
    cost = cost_op(op("aten.embedding", [table, ids], [t(16, 128, 1024, dtype="bfloat16")]))
    assert cost.engine is Engine.GPSIMD
    assert cost.hbm_bytes == 16 * 128 * 4 + 2 * 16 * 128 * 1024 * 2


def test_in_place_foreach_and_fused_adam_count_their_writes() -> None:
    params = [t(1000, 10), t(10), t(500, 3)]
    numel = sum(p.numel for p in params)
    add = cost_op(op("aten._foreach_add_.List", params + params, []))
    assert add.hbm_bytes == 3 * 4 * numel  # read two lists, write the first
    steps = [t() for _ in params]
    adam = cost_op(op("aten._fused_adamw_", params * 4 + steps, []))
    assert adam.hbm_bytes == 7 * 4 * numel + 4 * len(params)  # read p, g, m, v (+steps); write p, m, v
    assert adam.compute_seconds == pytest.approx(2.5 * (4 * numel + 3) / (128 * 1.12e9))


def test_host_copies_use_the_host_link() -> None:
    n = 1 << 24
    up = cost_op(op("emulator.host_to_device", [t(n)], [t(n)]))
    assert up.engine is Engine.DMA
    assert up.seconds == pytest.approx(NEURONCORE_V2.dma.fixed_cost.base + 4 * n / TRAINIUM1.host_link_bandwidth.base)
    on_device = cost_op(op("aten.clone", [t(n)], [t(n)]))
    assert on_device.compute_seconds == pytest.approx(4 * n / dma_bandwidth())
    assert on_device.seconds < up.seconds


# --- graph ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layers", [1, 12])
def test_graph_totals_bound_the_engines(layers: int) -> None:
    ops = step_ops(layers)
    graph = cost_graph(ops, BF16_ALL)
    assert graph.device_seconds > 0
    for engine, busy in graph.busy.items():
        assert 0 <= busy <= graph.device_seconds * (1 + 1e-12), engine
        assert 0 <= graph.utilization(engine) <= 1
    assert max(graph.busy.values()) <= graph.device_seconds <= graph.serial_seconds
    assert graph.device_seconds >= graph.hbm_seconds
    assert graph.flops == sum(o.flops for o in ops)
    assert graph.hbm_bytes == sum(c.hbm_bytes for c in graph.ops)
    assert graph.op_count == len(ops) > graph.device_op_count
    assert set(graph.busy) == {"tensor", "vector", "scalar", "gpsimd", "dma"}
    assert graph.busy["vector"] + graph.busy["gpsimd"] <= graph.device_seconds * (1 + 1e-12)  # shared SBUF port


def test_same_engine_serialises_other_engines_pipeline() -> None:
    a, b = mm(2048, 2048, 2048), mm(2048, 2048, 2048)
    same = cost_graph([a, b])
    assert same.device_seconds == pytest.approx(same.serial_seconds)
    act = op("aten.gelu", [t(2048, 2048, dtype="bfloat16")], [t(2048, 2048, dtype="bfloat16")])
    mixed = cost_graph([a, act], efficiency=1.0)  # the per-op model's own times
    assert mixed.device_seconds < mixed.serial_seconds
    assert mixed.device_seconds >= max(mixed.busy.values())
    # the consumer finishes one tile after its producer at the earliest
    fused_act = mixed.ops[1]  # gelu takes the mm's result on chip (fusion.py)
    tile = (fused_act.seconds - fused_act.overhead_seconds) / fused_act.tiles
    assert mixed.device_seconds >= cost_op(a).seconds + tile * (1 - 1e-9)


def test_empty_graph() -> None:
    graph = cost_graph([])
    assert graph.device_seconds == 0 and graph.flops == 0 and graph.utilization("tensor") == 0
    assert schedule([]) == 0


# --- dtypes and environment -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "flag", "expected"),
    [
        ({}, None, CostOptions()),
        ({"XLA_USE_BF16": "1"}, None, CostOptions("all", "bf16", True)),
        ({"XLA_DOWNCAST_BF16": "1"}, None, CostOptions("all", "bf16", True)),
        ({"XLA_USE_BF16": "1", "NEURON_RT_STOCHASTIC_ROUNDING_EN": "0"}, None, CostOptions("all", "bf16", False)),
        ({"XLA_USE_BF16": "0"}, None, CostOptions()),
        ({"NEURON_RT_STOCHASTIC_ROUNDING_EN": "1"}, None, CostOptions(stochastic_rounding=True)),
        ({"NEURON_CC_FLAGS": "--model-type=transformer --auto-cast matmult"}, None, CostOptions("matmult")),
        ({"NEURON_CC_FLAGS": "--auto-cast=all --auto-cast-type=fp16"}, None, CostOptions("all", "fp16")),
        ({"NEURON_CC_FLAGS": "--auto-cast all --auto-cast-type tf32"}, "none", CostOptions("none", "tf32")),
        ({}, "matmult", CostOptions("matmult")),
        ({"NEURON_CC_FLAGS": "--auto-cast none", "XLA_USE_BF16": "1"}, None, CostOptions("all", "bf16", True)),
    ],
)
def test_options_from_env(env: dict[str, str], flag: str | None, expected: CostOptions) -> None:
    assert options_from_env(env, flag) == expected


@pytest.mark.parametrize(
    ("env", "flag", "message"),
    [
        ({"XLA_USE_BF16": "maybe"}, None, "XLA_USE_BF16 must be 0 or 1"),
        ({"NEURON_CC_FLAGS": "--auto-cast fast"}, None, "auto-cast must be one of none, matmult, all"),
        ({"NEURON_CC_FLAGS": "--auto-cast-type=int4"}, None, "auto-cast-type must be one of"),
        ({"NEURON_CC_FLAGS": "--auto-cast"}, None, "--auto-cast needs a value"),
        ({"NEURON_CC_FLAGS": "--auto-cast 'all"}, None, "cannot be parsed"),
        ({}, "everything", "auto-cast must be one of"),
    ],
)
def test_options_from_env_rejects_bad_values(env: dict[str, str], flag: str | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        options_from_env(env, flag)


# --- collectives ---------------------------------------------------------------------------------------------


def _first_cores(kind: str, nbytes: int, ranks: int) -> float:
    """Seconds of a collective on the first ``ranks`` cores of trn1.32xlarge nodes (nccom-test's layout)."""
    return cost_group_collective(kind, nbytes, range(ranks), TRN1_32XLARGE).seconds


def test_collectives_match_nccom_calibration_at_1mib_and_above() -> None:
    checked = 0
    for series in NCCOM_CALIBRATION:
        for size, us in series.points:
            if size < 1 << 20:
                continue
            ratio = _first_cores(series.collective, size, series.ranks) / (us * 1e-6)
            assert 1 / 1.5 <= ratio <= 1.5, (series.name, size, ratio)
            checked += 1
    assert checked >= 13


def test_collective_floor_and_scaling() -> None:
    small = _first_cores("all_reduce", 1024, 2)
    assert small == pytest.approx(58e-6, rel=1e-3)
    assert _first_cores("all_reduce", 1 << 20, 1) == 0.0
    sizes = [_first_cores("all_reduce", 1 << p, 32) for p in range(10, 31, 4)]
    assert sizes == sorted(sizes)
    ranks = [_first_cores("all_reduce", 1 << 26, n) for n in (2, 8, 32)]
    assert ranks == sorted(ranks)
    two_nodes = _first_cores("all_reduce", 1 << 26, 64)
    assert two_nodes > ranks[-1]
    ar, ag = (_first_cores(k, 1 << 28, 32) for k in ("all_reduce", "all-gather"))
    assert ag < ar
    with pytest.raises(ValueError, match="unknown collective"):
        _first_cores("gossip", 1, 2)


def test_links_per_instance_type() -> None:
    trn1, trn1n, small = links_for(TRN1_32XLARGE), links_for(TRN1N_32XLARGE), links_for(TRN1_2XLARGE)
    assert trn1n.inter_bandwidth >= trn1.inter_bandwidth
    assert trn1n.inter_bandwidth <= trn1n.intra_bandwidth
    assert small.inter_bandwidth < trn1.inter_bandwidth / 10
    assert trn1.intra_hop == TRAINIUM1.links.intra_node_hop_latency_high.base
    assert trn1.inter_hop == TRAINIUM1.links.inter_node_hop_latency.base


# --- compile ---------------------------------------------------------------------------------------------


def test_compile_cost_is_monotone_in_op_count() -> None:
    ops = step_ops()
    costs = [compile_cost(ops[:n]) for n in (0, 10, 100, 1000, len(ops))]
    assert [c.seconds for c in costs] == sorted(c.seconds for c in costs)
    assert [c.model_code_bytes for c in costs] == sorted(c.model_code_bytes for c in costs)
    assert costs[-1].seconds > costs[0].seconds > 0
    views = [op("aten.view", [t(4)], [t(4)])] * 50
    assert compile_cost(views) == compile_cost([])  # views emit no instructions
    assert compile_cost(ops).device_ops == cost_graph(ops).device_op_count


def test_model_code_overhead_is_per_core() -> None:
    assert runtime_model_code_overhead_bytes() == 96_000_000
    assert compile_cost([mm(8, 8, 8)]).model_code_bytes < runtime_model_code_overhead_bytes()
