"""Parallel model-scale jobs without a daemon: layout, schedules, sharded HBM, OOM boundaries,
collectives per replica group, replay equivalence and the calibration rows (docs/parallel.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from emulator.costmodel.sdk import era_of
from emulator.hardware import get_instance_type
from emulator.parallel.calibrate import Row, fit_era
from emulator.parallel.host import HOST_SECONDS_PER_DEVICE_OP
from emulator.parallel.plan import ConfigError, make_config
from emulator.parallel.plan_file import load_rank_plan, plan_document, write_plan
from emulator.parallel.published import PUBLISHED_ROWS
from emulator.parallel.ranks import RankGrid
from emulator.parallel.replay import _executions
from emulator.parallel.runner import JobRequest, plan_request
from emulator.parallel.schedule import GraphTime, order, step_timeline
from emulator.runtime.compile_cache import CompileCache
from emulator.runtime.errors import NeuronRuntimeError
from emulator.runtime.execution import CompileCacheCounter
from emulator.workloads.models import zoo

TRN1_32 = get_instance_type("trn1.32xlarge")
GIB = 1 << 30


# --- layout --------------------------------------------------------------------------------------
def test_megatron_layout_tp_contiguous_dp_strided() -> None:
    cfg = make_config(cores_per_node=32, tp=8, micro_batch=1, global_batch=64, seq_len=2048)
    assert (cfg.dp, cfg.grad_accum) == (4, 16)
    grid = cfg.grid
    assert grid.groups("tp")[0] == list(range(8))
    assert grid.groups("dp")[0] == [0, 8, 16, 24]
    assert len(grid.groups("tp")) == 4 and len(grid.groups("dp")) == 8
    grid = make_config(cores_per_node=32, tp=2, pp=4, micro_batch=1, seq_len=128).grid
    assert grid.groups("pp")[0] == [0, 8, 16, 24]
    assert [p.pp_rank for p in grid.placements()][::8] == [0, 1, 2, 3]
    # two nodes: rank r on core r % 32 of node r // 32; the model-parallel group of a replica
    grid = make_config(cores_per_node=32, nodes=2, tp=8, pp=2, micro_batch=1, seq_len=128).grid
    assert (grid.place(40).node, grid.place(40).core, grid.place(40).dp_rank) == (1, 8, 1)
    assert grid.group_of("tp-pp", 9) == [*range(8, 16), *range(40, 48)]


def test_rank_grid_orders_and_coordinates() -> None:
    grid = RankGrid(tp=2, dp=3, pp=2)
    assert [grid.coords(r) for r in (0, 1, 2, 7)] == [
        {"tp": 0, "dp": 0, "pp": 0},
        {"tp": 1, "dp": 0, "pp": 0},
        {"tp": 0, "dp": 1, "pp": 0},
        {"tp": 1, "dp": 0, "pp": 1},
    ]
    assert all(grid.rank_of(**grid.coords(r)) == r for r in range(grid.world))
    assert grid.groups("dp") == [[0, 2, 4], [1, 3, 5], [6, 8, 10], [7, 9, 11]]
    other = RankGrid(tp=2, dp=3, pp=2, order="dp-tp-pp")  # DP fastest
    assert other.groups("dp")[0] == [0, 1, 2] and other.groups("tp")[0] == [0, 3]
    state = grid.state(7, sequence_parallel=True)
    assert (state.tp_rank, state.dp_rank, state.pp_rank, state.last_stage) == (1, 0, 1, True)
    assert state.group("tp") == [6, 7] and state.group("pp") == [1, 7]
    with pytest.raises(ValueError, match="unknown parallel group"):
        grid.groups("ep")
    with pytest.raises(ValueError, match="not divisible"):
        RankGrid.for_world(6, tp=4)


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"tp": 3}, "does not divide the 32 NeuronCores"),
        ({"tp": 8, "dp": 8}, "64 ranks, but there are 32"),
        ({"global_batch": 5}, "not a multiple of micro-batch"),
        ({"sequence_parallel": True}, "needs --tp 2"),
        ({"tp": 64, "dp": 1}, "64 ranks, but there are 32"),
        ({"schedule": "zigzag"}, "--schedule"),
    ],
)
def test_bad_layouts_are_one_line(kwargs: dict, text: str) -> None:
    with pytest.raises(ConfigError) as err:
        make_config(cores_per_node=32, micro_batch=1, seq_len=128, **kwargs)
    assert text in str(err.value) and "\n" not in str(err.value)


def test_model_does_not_split_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="heads"):
        plan_request(JobRequest("llama2-13b", tp=16, pp=1, dp=2, seq_len=128), TRN1_32)  # 40 heads
    with pytest.raises(ConfigError, match="unknown model"):
        plan_request(JobRequest("gpt5"), TRN1_32)


# --- schedules -----------------------------------------------------------------------------------
def test_1f1b_order_warms_up_then_alternates() -> None:
    assert order("1f1b", 0, 4, 6)[:4] == [("F", 0), ("F", 1), ("F", 2), ("F", 3)]
    assert order("1f1b", 3, 4, 6)[:4] == [("F", 0), ("B", 0), ("F", 1), ("B", 1)]
    assert order("gpipe", 1, 4, 3) == [("F", 0), ("F", 1), ("F", 2), ("B", 0), ("B", 1), ("B", 2)]


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_pipeline_bubble_is_p_minus_1_over_m_plus_p_minus_1(schedule: str) -> None:
    p, m = 4, 8
    unit = GraphTime(1.0, 0.0, 0.0)
    graphs = {"forward": unit, "backward": unit, "backward_accumulate": unit, "optimizer": GraphTime(0, 0, 0)}
    timeline = step_timeline({s: graphs for s in range(p)}, stages=p, micro_batches=m, schedule=schedule)
    assert timeline.step_seconds == pytest.approx(2 * (m + p - 1))
    for s in range(p):
        assert timeline.bubble(s) == pytest.approx((p - 1) / (m + p - 1))
    in_flight = [tl.max_in_flight for tl in timeline.stages]
    assert in_flight == ([4, 3, 2, 1] if schedule == "1f1b" else [m] * p)


def test_point_to_point_sends_lengthen_the_pipeline() -> None:
    unit = GraphTime(1.0, 0.0, 0.0)
    graphs = {"forward": unit, "backward": unit, "backward_accumulate": unit, "optimizer": GraphTime(0, 0, 0)}
    base = step_timeline({s: graphs for s in range(2)}, stages=2, micro_batches=4)
    sent = step_timeline({s: graphs for s in range(2)}, stages=2, micro_batches=4, send_seconds=lambda s: 0.5)
    assert sent.step_seconds > base.step_seconds


# --- planned jobs (traced once per module: tracing a model takes seconds) ---------------------
@pytest.fixture(scope="module")
def gpt_tp8() -> object:
    return plan_request(JobRequest("gpt3-6.7b", tp=8, dp=4, micro_batch=1, global_batch=8, seq_len=2048), TRN1_32)


def test_gpt3_6_7b_on_one_core_is_nrt_resource() -> None:
    with pytest.raises(NeuronRuntimeError) as err:
        plan_request(JobRequest("gpt3-6.7b", tp=1, dp=1, seq_len=2048), TRN1_32)
    assert err.value.status == "NRT_RESOURCE"
    assert "ND 0:NC 0" in err.value.message and "status=4" in err.value.message


def test_tp8_core_holds_its_shard(gpt_tp8) -> None:  # type: ignore[no-untyped-def]
    mem = gpt_tp8.stages[0].program.memory
    spec = zoo.MODELS["gpt3-6.7b"]
    full = zoo.count_parameters(spec)
    # one TP shard: an eighth of the model, plus the replicated positions, norms and biases and the
    # vocabulary padding (51,200 rows for TP8); held in bf16
    shard = gpt_tp8.stages[0].program.parameters
    assert full / 8 <= shard <= full / 8 * 1.06
    assert mem.weights == 2 * shard
    assert mem.gradients == mem.weights  # bf16 gradients, same shapes
    assert mem.optimizer == 2 * mem.weights  # AdamW's two moments in bf16 (BF16 + SR)
    assert gpt_tp8.hbm_peak(0) < 16 * GIB


def test_tp_and_dp_collectives_run_in_their_groups(gpt_tp8) -> None:  # type: ignore[no-untyped-def]
    cost = gpt_tp8.stages[0]
    tp = [c for c in cost.collectives["micro_step_accumulate"] if c.group == "tp"]
    layers = zoo.MODELS["gpt3-6.7b"].layers
    # Megatron: two all-reduces forward (attention, MLP) and two backward per layer, + embedding/loss
    assert len([c for c in tp if c.kind == "all_reduce"]) >= 4 * layers
    assert {c.ranks for c in tp} == {8}
    activation = 1 * 2048 * 4096 * 2  # [s, b, h] in bf16
    assert max(c.nbytes for c in tp) >= activation
    dp = [c for c in cost.collectives["optimizer"] if c.group == "dp"]
    assert len(dp) == 1 and dp[0].ranks == 4 and dp[0].kind == "all_reduce"
    assert dp[0].nbytes == cost.program.memory.gradients  # the whole gradient of the shard
    assert dp[0].link_bytes["neuronlink"] > 0  # cores 0, 8, 16, 24 sit on different chips


def test_zero1_shards_optimizer_state_over_dp() -> None:
    req = JobRequest("bert-large", dp=32, micro_batch=8, seq_len=128, zero1=True)
    plan = plan_request(req, TRN1_32)
    mem = plan.stages[0].program.memory
    kinds = [c.kind for c in plan.stages[0].collectives["optimizer"] if c.group == "dp"]
    assert kinds == ["reduce_scatter", "all_gather"]
    assert mem.optimizer < mem.weights  # 2 moments + shard copies over 32 ranks, not 2x the weights


def test_pipeline_stages_hold_their_layers_and_activations_in_flight() -> None:
    # the recipe's ZeRO-1 and sequence parallelism off: whole-sequence sends, full optimizer state
    req = JobRequest(
        "llama2-7b", tp=8, pp=4, dp=1, micro_batch=1, global_batch=8, seq_len=512, zero1=False, sequence_parallel=False
    )
    plan = plan_request(req, TRN1_32)
    assert [tl.max_in_flight for tl in plan.timeline.stages] == [4, 3, 2, 1]
    assert all(plan.timeline.bubble(s) > 0.1 for s in range(4))
    assert plan.stages[0].program.send_bytes == 512 * 1 * 4096 * 2
    peaks = [plan.hbm_peak(s) for s in range(4)]
    assert peaks[0] > peaks[2]  # stage 0 holds four micro-batches' activations, stage 2 two


# --- replay equivalence --------------------------------------------------------------------------
def test_replayed_step_reports_exactly_the_traced_graphs(gpt_tp8, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    again = plan_request(JobRequest("gpt3-6.7b", tp=8, dp=4, micro_batch=1, global_batch=8, seq_len=2048), TRN1_32)
    # tracing the step again yields the same graphs, hashes and costs: replaying is the same work
    assert again.stages[0].program.graphs == gpt_tp8.stages[0].program.graphs
    models = {}
    for name, graph in gpt_tp8.stages[0].program.graphs.items():
        models[(0, name)] = CompileCache(None).load(graph.graph_hash, (), graph.code_bytes)
    path = tmp_path / "plan.json"
    write_plan(plan_document(gpt_tp8, steps=3, models=models, compile_seconds=0.0), path)
    rank = load_rank_plan(str(path), 13)
    assert (rank.core, rank.stage) == (13, 0)
    executions, _ = _executions(rank, 2, 100.0, CompileCacheCounter())
    bodies = [ex.to_wire() for ex in executions]
    slots = gpt_tp8.timeline.stages[0].slots
    assert [b["start"] - 100.0 for b in bodies] == pytest.approx([s.start for s in slots])
    for body, slot in zip(bodies, slots, strict=True):
        graph = gpt_tp8.stages[0].program.graphs[slot.graph]
        t = gpt_tp8.stages[0].times[slot.graph]
        assert body["flops"] == graph.flops
        assert body["device_seconds"] == pytest.approx(t.device_seconds)
        assert body["engines"] == pytest.approx(graph.engines)
        # identical collectives are folded into one entry with a count: none is lost
        assert sum(c["count"] for c in body["collectives"]) == len(graph.collectives)
        assert len(body["collectives"]) <= 8 or slot.graph.startswith("optimizer")
        assert body["memory"]["core"]["constants"] == gpt_tp8.stages[0].program.memory.weights
    json.dumps(bodies)  # what the daemon receives


# --- calibration ----------------------------------------------------------------------------------
def test_2022_rows_within_ten_percent_and_constants_are_the_fit() -> None:
    """The SDK 2.3 era: its efficiency and the host share are the joint fit on its two rows."""
    era = era_of("2.3")
    published = [row for row in PUBLISHED_ROWS if row.name in era.fitted_on]
    rows = [Row(r.name, plan_request(r.request, TRN1_32, env={}), r.published_seq_per_s or 0) for r in published]
    for row in rows:
        assert 0.9 <= row.plan.samples_per_second / row.published <= 1.1, row.name
    assert rows[0].plan.utilization(0) == pytest.approx(0.80, abs=0.01)  # the BERT tutorial's figure
    result = fit_era("2.3", rows, host_row=rows[0])
    assert math.isclose(result.efficiency, era.efficiency, rel_tol=0.01)
    assert math.isclose(result.host_seconds_per_op, HOST_SECONDS_PER_DEVICE_OP, rel_tol=0.02)


def test_image_model_plans_with_inputs_in_the_training_dtype() -> None:
    plan = plan_request(JobRequest("vit-base", dp=2, micro_batch=2), get_instance_type("trn1.2xlarge"))
    assert plan.sample_unit == "images" and plan.tokens_per_sample == 197
    assert plan.samples_per_second > 0 and 0 < plan.utilization(0) < 1


def test_recompute_trades_activation_memory_for_compute() -> None:
    trn1_2 = get_instance_type("trn1.2xlarge")
    plain = plan_request(JobRequest("vit-base", dp=2, micro_batch=8), trn1_2)
    again = plan_request(JobRequest("vit-base", dp=2, micro_batch=8, recompute="full"), trn1_2)
    kept, recomputed = plain.stages[0].program.memory, again.stages[0].program.memory
    assert recomputed.activations < kept.activations / 2  # only the layers' inputs are kept
    step, step_rc = (p.stages[0].program.graphs["micro_step"] for p in (plain, again))
    assert step_rc.flops > step.flops * 1.25  # the forward runs again in the backward pass
    assert step_rc.compute_seconds > step.compute_seconds


def test_a_models_published_recipe_sets_what_the_request_leaves_open() -> None:
    from emulator.parallel.runner import recipe_defaults, resolve

    open_ = JobRequest("llama2-7b", tp=8, nodes=4)
    config, _ = resolve(open_, TRN1_32)
    # neuronx-distributed's tp_zero1_llama recipe (emulator/workloads/models/recipes.py)
    assert config.zero1 and config.sequence_parallel and config.flash_attention and config.master_weights
    assert config.recompute == "selective"
    assert config.recompute_mlp == "activation"  # modeling_llama_nxd.py's activation_mlp checkpoint
    assert recipe_defaults(open_) == [
        "zero1",
        "recompute",
        "recompute_mlp",
        "sequence_parallel",
        "flash_attention",
        "master_weights",
    ]
    off = JobRequest(
        "llama2-7b", tp=8, nodes=4, zero1=False, sequence_parallel=False, recompute="none", flash_attention=False
    )
    config, _ = resolve(off, TRN1_32)
    assert not config.zero1 and not config.sequence_parallel and config.recompute == "none"
    assert config.recompute_mlp == "none"  # --no-recompute keeps every activation
    assert recipe_defaults(off) == ["master_weights"]
    config, _ = resolve(JobRequest("llama2-7b", tp=1), TRN1_32)  # no TP: no sequence parallelism to turn on
    assert config.zero1 and not config.sequence_parallel
    config, _ = resolve(JobRequest("llama2-13b"), TRN1_32)  # run: the recipe's TP and PP on one node
    assert (config.tp, config.pp, config.dp, config.nodes, config.global_batch) == (8, 4, 1, 1, 1)
    config, _ = resolve(JobRequest("llama2-13b", published_scale=True), TRN1_32)  # bench: the published run
    assert (config.tp, config.pp, config.dp, config.nodes, config.global_batch) == (8, 4, 32, 32, 1024)
    config, _ = resolve(JobRequest("vit-base"), TRN1_32)  # no recipe: tp 1, switches off
    assert (config.tp, config.zero1, config.recompute, config.flash_attention) == (1, False, "none", False)
