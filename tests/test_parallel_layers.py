"""Tensor-parallel layers (emulator.parallel.layers): plain PyTorch at tp=1, Megatron's sharding
and collectives at tp>1, and the tp=2 arithmetic on real values through a threaded all-reduce."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from emulator.parallel.comm import CollectiveCall, RecordingCommunicator, set_communicator
from emulator.parallel.layers import (
    ColumnParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
    allreduce_sequence_parallel_grads,
    sequence_parallel_parameters,
    vocab_parallel_cross_entropy,
)
from emulator.parallel.mappings import (
    copy_to_tp_region,
    gather_from_sp_region,
    gather_from_tp_region,
    reduce_from_tp_region,
    reduce_scatter_to_sp_region,
    scatter_to_tp_region,
)
from emulator.parallel.partition import mark_sequence_parallel
from emulator.parallel.ranks import RankGrid
from tests.parallel_support import ThreadedCommunicator

pytestmark = pytest.mark.usefixtures("no_communicator")


def recording(tp: int, *, sp: bool = False, rank: int = 0) -> RecordingCommunicator:
    rec = RecordingCommunicator(RankGrid(tp=tp).state_at(tp=rank, sequence_parallel=sp))
    set_communicator(rec)
    return rec


def meta(*shape: int, grad: bool = True) -> torch.Tensor:
    return torch.empty(*shape, device="meta", requires_grad=grad)


# ------------------------------------------------------------------------------------------------
# tp = 1: exactly plain PyTorch


def test_tp1_linears_are_nn_linear() -> None:
    torch.manual_seed(0)
    x = torch.randn(5, 3, 16, requires_grad=True)
    for parallel in (ColumnParallelLinear(16, 24), RowParallelLinear(16, 24)):
        ref = torch.nn.Linear(16, 24)
        with torch.no_grad():
            parallel.bias.normal_()
            ref.weight.copy_(parallel.weight)
            ref.bias.copy_(parallel.bias)
        assert parallel.weight.shape == (24, 16)
        y, y_ref = parallel(x), ref(x)
        assert torch.equal(y, y_ref)
        g = torch.randn_like(y)
        (gx, gw, gb) = torch.autograd.grad(y, (x, parallel.weight, parallel.bias), g)
        (gx_ref, gw_ref, gb_ref) = torch.autograd.grad(y_ref, (x, ref.weight, ref.bias), g)
        assert torch.equal(gx, gx_ref) and torch.equal(gw, gw_ref) and torch.equal(gb, gb_ref)


def test_tp1_embedding_is_nn_embedding() -> None:
    torch.manual_seed(0)
    emb = VocabParallelEmbedding(50, 8)
    ref = torch.nn.Embedding(50, 8)
    with torch.no_grad():
        ref.weight.copy_(emb.weight)
    ids = torch.randint(0, 50, (4, 7))
    y, y_ref = emb(ids), ref(ids)
    assert torch.equal(y, y_ref)
    y.pow(2).sum().backward()
    y_ref.pow(2).sum().backward()
    assert torch.equal(emb.weight.grad, ref.weight.grad)


def test_tp1_cross_entropy_is_f_cross_entropy() -> None:
    torch.manual_seed(0)
    logits = torch.randn(6, 3, 40, requires_grad=True)
    targets = torch.randint(0, 40, (6, 3))
    targets[0, 0] = -100
    loss = vocab_parallel_cross_entropy(logits, targets, ignore_index=-100)
    ref = F.cross_entropy(logits.reshape(-1, 40), targets.reshape(-1), reduction="none").view(6, 3)
    assert torch.equal(loss, ref) and loss[0, 0] == 0
    (g,) = torch.autograd.grad(loss.sum(), logits)
    (g_ref,) = torch.autograd.grad(ref.sum(), logits)
    assert torch.equal(g, g_ref)


def test_tp1_mappings_are_the_identity_and_record_nothing() -> None:
    rec = recording(1, sp=True)
    x = torch.randn(4, 2, 8)
    for fn in (copy_to_tp_region, reduce_from_tp_region, gather_from_sp_region, reduce_scatter_to_sp_region):
        assert fn(x) is x
    assert gather_from_tp_region(x) is x and scatter_to_tp_region(x) is x
    assert rec.take() == []


# ------------------------------------------------------------------------------------------------
# tp = 8 on meta: shard shapes and the collectives of each mapping


def test_shards_are_one_tp_th() -> None:
    recording(8)
    with torch.device("meta"):
        col, row, emb = ColumnParallelLinear(1024, 4096), RowParallelLinear(4096, 1024), VocabParallelEmbedding(512, 64)
    assert col.weight.shape == (512, 1024) and col.bias.shape == (512,)
    assert row.weight.shape == (1024, 512) and row.bias.shape == (1024,)
    assert emb.weight.shape == (64, 64)
    assert col.weight.is_meta and row.weight.is_meta


@pytest.mark.parametrize(
    ("fn", "forward", "backward"),
    [
        (copy_to_tp_region, [], [("all_reduce", 8 * 2 * 64 * 4)]),
        (reduce_from_tp_region, [("all_reduce", 8 * 2 * 64 * 4)], []),
        (gather_from_sp_region, [("all_gather", 64 * 2 * 64 * 4)], [("reduce_scatter", 64 * 2 * 64 * 4)]),
        (reduce_scatter_to_sp_region, [("reduce_scatter", 8 * 2 * 64 * 4)], [("all_gather", 8 * 2 * 64 * 4)]),
        (gather_from_tp_region, [("all_gather", 8 * 2 * 512 * 4)], []),
        (scatter_to_tp_region, [], [("all_gather", 8 * 2 * 64 * 4)]),
    ],
)
def test_mapping_collectives(fn: Callable, forward: list, backward: list) -> None:
    rec = recording(8, sp=True)
    x = meta(8, 2, 64)
    y = fn(x)
    assert [(c.kind, c.nbytes) for c in rec.take()] == forward
    assert all(c.group == "tp" for c in rec.calls)
    y.sum().backward()
    assert [(c.kind, c.nbytes) for c in rec.take()] == backward
    assert x.grad.shape == x.shape


def test_column_and_row_parallel_collectives_without_sp() -> None:
    rec = recording(8)
    with torch.device("meta"):
        col, row = ColumnParallelLinear(256, 1024), RowParallelLinear(1024, 256)
    x = meta(16, 2, 256)
    y = row(torch.nn.functional.gelu(col(x)))
    assert y.shape == (16, 2, 256)
    assert rec.take() == [CollectiveCall("all_reduce", "tp", 16 * 2 * 256 * 4)]
    y.sum().backward()
    assert rec.take() == [CollectiveCall("all_reduce", "tp", 16 * 2 * 256 * 4)]
    assert col.weight.grad.shape == (128, 256) and row.weight.grad.shape == (256, 128)


def test_column_parallel_under_sp_gathers_again_for_the_weight_gradient() -> None:
    rec = recording(8, sp=True)
    with torch.device("meta"):
        col, row = ColumnParallelLinear(256, 1024), RowParallelLinear(1024, 256)
    x = meta(2, 2, 256)  # [s/tp, b, h]: s = 16
    y = row(col(x))
    assert y.shape == (2, 2, 256)
    full = 16 * 2 * 256 * 4
    assert [(c.kind, c.nbytes) for c in rec.take()] == [("all_gather", full), ("reduce_scatter", full)]
    y.sum().backward()
    got = Counter((c.kind, c.nbytes) for c in rec.take())
    # row: all-gather of the output gradient; column: re-gather of the input, reduce-scatter of its gradient
    assert got == Counter({("all_gather", full): 2, ("reduce_scatter", full): 1})
    assert x.grad.shape == x.shape
    assert sequence_parallel_parameters(row.parameters()) == [row.bias]


def test_vocab_parallel_embedding_and_cross_entropy_collectives() -> None:
    rec = recording(8)
    with torch.device("meta"):
        emb = VocabParallelEmbedding(1024, 32)
    ids = torch.empty(16, 2, dtype=torch.long, device="meta")
    out = emb(ids)
    assert out.shape == (16, 2, 32)
    assert rec.take() == [CollectiveCall("all_reduce", "tp", 16 * 2 * 32 * 4)]
    logits = meta(16, 2, 128)
    loss = vocab_parallel_cross_entropy(logits.to(torch.bfloat16), ids)
    assert loss.shape == (16, 2) and loss.dtype == torch.float32
    # max, target logit, sum of exponentials: [tokens] fp32 each
    assert rec.take() == [CollectiveCall("all_reduce", "tp", 16 * 2 * 4)] * 3
    loss.sum().backward()
    assert rec.take() == [] and logits.grad.shape == logits.shape

    rec = recording(8, sp=True)
    out = emb(ids)
    assert out.shape == (2, 2, 32)
    assert rec.take() == [CollectiveCall("reduce_scatter", "tp", 16 * 2 * 32 * 4)]


def test_allreduce_of_sequence_parallel_grads_is_one_coalesced_call() -> None:
    rec = recording(8, sp=True)
    with torch.device("meta"):
        row = RowParallelLinear(64, 32)
        norm = torch.nn.LayerNorm(32)
    for p in norm.parameters():
        mark_sequence_parallel(p)
    module = torch.nn.ModuleList([row, norm])
    norm(row(meta(16, 1, 8))).sum().backward()  # [s, b, in/tp] -> [s/tp, b, out]
    rec.take()
    allreduce_sequence_parallel_grads(module.parameters())
    assert rec.take() == [CollectiveCall("all_reduce", "tp", (32 + 32 + 32) * 4)]


@pytest.mark.parametrize(
    "build",
    [
        lambda: ColumnParallelLinear(10, 12),
        lambda: RowParallelLinear(12, 10),
        lambda: VocabParallelEmbedding(30522, 8),
    ],
)
def test_divisibility_errors_are_one_line(build: Callable) -> None:
    recording(8)
    with pytest.raises(ValueError, match="not divisible by tensor-parallel size 8") as err:
        build()
    assert "\n" not in str(err.value)


def test_sp_needs_input_is_parallel_and_no_gathered_output() -> None:
    recording(2, sp=True)
    with pytest.raises(ValueError, match="sequence parallel"):
        RowParallelLinear(8, 8, input_is_parallel=False)
    with pytest.raises(ValueError, match="sequence parallel"):
        ColumnParallelLinear(8, 8, gather_output=True)


# ------------------------------------------------------------------------------------------------
# tp = 2 on real values: each rank in a thread, all-reduce done for real


def test_tp2_mlp_embedding_and_cross_entropy_match_tp1_on_real_values() -> None:
    torch.manual_seed(0)
    vocab, hidden, ffn = 12, 8, 16
    ids = torch.randint(0, vocab, (5, 3))
    targets = torch.randint(0, vocab, (5, 3))
    emb_w, up_w, up_b = torch.randn(vocab, hidden), torch.randn(ffn, hidden), torch.randn(ffn)
    down_w, down_b, head_w = torch.randn(hidden, ffn), torch.randn(hidden), torch.randn(vocab, hidden)

    def run(tp: int, rank: int) -> tuple[torch.Tensor, list[torch.nn.Parameter]]:
        emb = VocabParallelEmbedding(vocab, hidden)
        up, down = ColumnParallelLinear(hidden, ffn), RowParallelLinear(ffn, hidden)
        head = torch.nn.Parameter(head_w.chunk(tp)[rank].clone())
        with torch.no_grad():  # this rank's shards of the full weights
            emb.weight.copy_(emb_w.chunk(tp)[rank])
            up.weight.copy_(up_w.chunk(tp)[rank])
            up.bias.copy_(up_b.chunk(tp)[rank])
            down.weight.copy_(down_w.chunk(tp, dim=1)[rank])
            down.bias.copy_(down_b)
        y = down(F.gelu(up(emb(ids))))
        logits = F.linear(copy_to_tp_region(y), head)
        loss = vocab_parallel_cross_entropy(logits, targets).mean()
        loss.backward()
        return loss.detach(), [emb.weight, up.weight, down.weight, down.bias, head]

    ref_loss, ref = run(1, 0)
    tp = 2
    threaded = ThreadedCommunicator(tp)
    set_communicator(threaded)  # type: ignore[arg-type]

    def rank_fn(rank: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
        loss, params = run(tp, rank)
        return loss, [p.grad for p in params]

    results = threaded.run(rank_fn)
    for loss, _ in results:
        torch.testing.assert_close(loss, ref_loss)
    grads = [r[1] for r in results]
    emb_g, up_g, down_g, down_b_g, head_g = (p.grad for p in ref)
    torch.testing.assert_close(torch.cat([g[0] for g in grads]), emb_g)
    torch.testing.assert_close(torch.cat([g[1] for g in grads]), up_g)
    torch.testing.assert_close(torch.cat([g[2] for g in grads], dim=1), down_g)
    torch.testing.assert_close(grads[0][3], down_b_g)
    torch.testing.assert_close(torch.cat([g[4] for g in grads]), head_g)
    # forward: embedding, MLP output, 3 in the loss; backward: the head's input and the MLP's input
    assert Counter(threaded.kinds) == Counter({"all_reduce": 7})


# ------------------------------------------------------------------------------------------------
# neuronx-distributed's layers are these layers: one tag vocabulary for the gradient code


def test_nxd_sequence_parallel_bias_gradient_is_all_reduced_over_tp(monkeypatch: pytest.MonkeyPatch) -> None:
    """A RowParallelLinear built through the neuronx_distributed shim with
    ``sequence_parallel_enabled``: each rank's bias gradient covers its slice of the sequence
    only; the shim's ``grads.allreduce_sequence_parallel_gradients`` (the same helper as the
    model-scale layers') finds the bias by its tag and sums it over the tensor-parallel group."""
    from emulator.compat import nxd_state
    from emulator.shims.neuronx_distributed.parallel_layers import grads
    from emulator.shims.neuronx_distributed.parallel_layers.layers import RowParallelLinear as NxDRowParallelLinear

    tp, seq, batch, hidden, out = 2, 4, 3, 8, 5
    monkeypatch.setattr(nxd_state, "_grid", RankGrid(tp=tp))  # initialize_model_parallel, minus torch.distributed
    threaded = ThreadedCommunicator(tp)
    set_communicator(threaded)  # type: ignore[arg-type]
    torch.manual_seed(0)
    x, upstream = torch.randn(seq, batch, hidden), torch.randn(seq, batch, out)

    def rank_fn(rank: int) -> tuple[list[torch.Tensor], torch.Tensor, list[str]]:
        layer = NxDRowParallelLinear(hidden, out, input_is_parallel=True, sequence_parallel_enabled=True)
        y = layer(x.chunk(tp, dim=-1)[rank])  # [s, b, h/tp] -> [s/tp, b, out], reduce-scattered
        (y * upstream.chunk(tp, dim=0)[rank]).sum().backward()
        partial = layer.bias.grad.clone()
        grads.allreduce_sequence_parallel_gradients(torch.optim.SGD(layer.parameters(), lr=0.1))
        return (
            [partial, layer.bias.grad],
            layer.weight.grad,
            [p.__dict__.get("sequence_parallel_enabled") for p in (layer.weight, layer.bias)],
        )

    results = threaded.run(rank_fn)
    full = upstream.sum((0, 1))  # the bias gradient of the whole sequence
    partials = [r[0][0] for r in results]
    assert not torch.allclose(partials[0], full)  # each rank saw half of the sequence
    torch.testing.assert_close(partials[0] + partials[1], full)
    for (_, reduced), _, tags in results:
        torch.testing.assert_close(reduced, full)
        assert tags == [None, True]  # the weight is a shard (tensor_model_parallel), not sequence-parallel
    # forward reduce-scatter, backward all-gather, then one all-reduce of the tagged gradients
    assert threaded.kinds == ["reduce_scatter", "all_gather", "all_reduce"]
