"""Model-scale zoo (emulator.workloads.models.zoo, built by emulator.parallel.models): sizes
against the published ones, pipeline stages built alone on meta, Megatron's collectives per
layer, activation recomputation through the device-tensor wrapper, configuration errors — and,
on small configurations with real values, the same losses as independent references, across
pipeline splits and across tensor-parallel ranks."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Iterator
from typing import NamedTuple

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import _pop_mode, _push_mode

from emulator.capture import tensor as dt
from emulator.capture.recorder import Recorder
from emulator.parallel.comm import RecordingCommunicator, set_communicator
from emulator.parallel.models.stage import build_stage, stage_inputs
from emulator.parallel.models.transformer import IGNORE_INDEX, StageModule, TransformerLayer
from emulator.parallel.ranks import RankGrid
from emulator.workloads.models.gpt import GPT
from emulator.workloads.models.layers import TransformerConfig
from emulator.workloads.models.zoo import (
    MODELS,
    ModelSpec,
    count_parameters,
    padded_vocab,
    tokens_per_sample,
    validate,
)
from tests.parallel_support import ThreadedCommunicator

pytestmark = pytest.mark.usefixtures("no_communicator")


def place(
    tp: int = 1, pp: int = 1, *, tp_rank: int = 0, pp_rank: int = 0, sequence_parallel: bool = False
) -> RecordingCommunicator:
    grid = RankGrid(tp=tp, pp=pp)
    rec = RecordingCommunicator(grid.state_at(tp=tp_rank, pp=pp_rank, sequence_parallel=sequence_parallel))
    set_communicator(rec)
    return rec


def tp_for(spec: ModelSpec) -> int:
    return 4 if spec.family == "vit" else 8


def seq_for(spec: ModelSpec) -> int:
    return spec.max_seq_len if spec.family == "vit" else 64


def run_stage(module: StageModule, spec: ModelSpec, batch: int, seq: int) -> tuple[torch.Tensor, tuple]:
    inputs = stage_inputs(spec, module, batch, seq)
    out = module(*inputs)
    (out if out.dim() == 0 else out.float().square().sum()).backward()
    return out, inputs


# ------------------------------------------------------------------------------------------------
# sizes


PUBLISHED = {  # name: (published size, where it is stated)
    "bert-large": 340e6,  # Devlin et al. 2018 (HF BertForPreTraining: 336M)
    "gpt3-6.7b": 6.7e9,
    "gpt3-23b": 23e9,
    "gpt3-46b": 46e9,
    "gpt3-175b": 175e9,
    "llama2-7b": 6.74e9,  # the checkpoint's count; "7B" is the rounded name (3.7 % above)
    "llama2-13b": 13.0e9,
    "llama2-70b": 69.0e9,  # named "70B"
    "llama3.1-8b": 8.03e9,
    "llama3.1-70b": 70.6e9,
    "vit-base": 86e6,
}


def test_every_model_has_a_published_size_and_a_source() -> None:
    assert set(MODELS) == set(PUBLISHED)
    for name, spec in MODELS.items():
        assert spec.name == name and spec.source and spec.description
        assert spec.sample_unit == ("images" if spec.family == "vit" else "seq")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_full_model_builds_on_meta_fast_and_matches_the_published_size(name: str) -> None:
    spec = MODELS[name]
    place()  # tp = pp = 1: the whole model in one stage
    started = time.perf_counter()
    module = build_stage(spec, seq_len=spec.default_seq_len)
    assert time.perf_counter() - started < 2.0
    params = list(module.parameters())
    assert all(p.is_meta for p in params)
    built = sum(p.numel() for p in params)
    assert built == module.parameters_total == count_parameters(spec)
    assert abs(built / PUBLISHED[name] - 1) < 0.02, f"{name}: {built:,} vs {PUBLISHED[name]:,.0f}"


def test_exact_sizes() -> None:
    assert count_parameters(MODELS["llama2-7b"]) == 6_738_415_616
    assert count_parameters(MODELS["llama2-70b"]) == 68_976_648_192
    assert count_parameters(MODELS["llama3.1-8b"]) == 8_030_261_248
    assert count_parameters(MODELS["llama3.1-70b"]) == 70_553_706_496
    assert count_parameters(MODELS["vit-base"]) == 86_567_656
    assert count_parameters(MODELS["bert-large"]) == 336_226_108
    assert padded_vocab(MODELS["gpt3-6.7b"], 1) == 50304 and padded_vocab(MODELS["gpt3-6.7b"], 8) == 51200
    assert padded_vocab(MODELS["bert-large"], 1) == 30522 and padded_vocab(MODELS["bert-large"], 8) == 30528


# ------------------------------------------------------------------------------------------------
# tensor-parallel shards and collectives


def test_gpt_shards_at_tp8() -> None:
    spec = MODELS["gpt3-6.7b"]
    place(tp=8, pp=4, pp_rank=0)
    stage = build_stage(spec, seq_len=2048)
    shapes = {name: tuple(p.shape) for name, p in stage.named_parameters()}
    assert shapes["embedding.word.weight"] == (51200 // 8, 4096)
    assert shapes["embedding.position"] == (2048, 4096)
    assert shapes["layers.0.attention.qkv.weight"] == (3 * 4096 // 8, 4096)
    assert shapes["layers.0.attention.qkv.bias"] == (3 * 4096 // 8,)
    assert shapes["layers.0.attention.out.weight"] == (4096, 4096 // 8)
    assert shapes["layers.0.attention.out.bias"] == (4096,)
    assert shapes["layers.0.mlp.up.weight"] == (16384 // 8, 4096)
    assert shapes["layers.0.mlp.down.weight"] == (4096, 16384 // 8)
    assert shapes["layers.0.norm1.weight"] == (4096,)
    assert sorted({int(n.split(".")[1]) for n in shapes if n.startswith("layers.")}) == list(range(8))
    assert stage.parameters_total == count_parameters(spec, 8)


@pytest.mark.parametrize(("tp", "kv_rows"), [(8, 1), (32, 1)])
def test_llama_gqa_kv_heads_split_then_replicate(tp: int, kv_rows: int) -> None:
    spec = MODELS["llama2-70b"]  # 64 heads, 8 KV heads
    place(tp=tp, pp=8, pp_rank=7)
    stage = build_stage(spec, seq_len=4096)
    layer = stage.layers["70"]
    assert isinstance(layer, TransformerLayer)
    attn = layer.attention
    assert (attn.heads, attn.kv_heads, attn.kv_replicas) == (64 // tp, kv_rows, 1 if tp == 8 else 4)
    assert attn.qkv.weight.shape == ((64 // tp + 2 * kv_rows) * 128, 8192)
    assert layer.mlp.up.weight.shape == (2 * 28672 // tp, 8192)
    assert stage.head.output.weight.shape == (32000 // tp, 8192)
    assert stage.parameters_total == count_parameters(spec)  # replicated KV heads counted once


def _layer_calls(sp: bool) -> tuple[list[tuple[str, int]], Counter]:
    spec = MODELS["gpt3-6.7b"]
    rec = place(tp=8, sequence_parallel=sp)
    with torch.device("meta"):
        layer = TransformerLayer(spec)
    seq, batch = 2048, 1
    x = torch.empty(seq // 8 if sp else seq, batch, 4096, device="meta", requires_grad=True)
    mask = torch.ones(seq, seq, dtype=torch.bool, device="meta").triu(1)
    y = layer(x, None, mask)
    assert y.shape == x.shape
    forward = [(c.kind, c.nbytes) for c in rec.take()]
    assert all(c.group == "tp" for c in rec.calls)
    y.sum().backward()
    backward = Counter((c.kind, c.nbytes) for c in rec.take())
    return forward, backward


def test_gpt_layer_collectives_without_sequence_parallelism() -> None:
    forward, backward = _layer_calls(sp=False)
    activation = 2048 * 1 * 4096 * 4  # [s, b, h] fp32
    assert forward == [("all_reduce", activation)] * 2  # attention output, MLP output
    assert backward == Counter({("all_reduce", activation): 2})  # inputs of QKV and of MLP up


def test_gpt_layer_collectives_with_sequence_parallelism() -> None:
    forward, backward = _layer_calls(sp=True)
    full = 2048 * 1 * 4096 * 4  # the gathered [s, b, h] (all-gather output, reduce-scatter input)
    assert forward == [("all_gather", full), ("reduce_scatter", full)] * 2
    # row-parallel: all-gather of the output gradient (x2); column-parallel: all-gather of the input
    # again for the weight gradient and reduce-scatter of the input gradient (x2 each)
    assert backward == Counter({("all_gather", full): 4, ("reduce_scatter", full): 2})


def test_lm_head_and_loss_collectives() -> None:
    spec = MODELS["gpt3-6.7b"]
    rec = place(tp=8, pp=2, pp_rank=1)
    stage = build_stage(spec, seq_len=128)
    stage.layers.clear()  # the head alone
    run_stage(stage, spec, 2, 128)
    calls = rec.take()
    tokens = 128 * 2
    assert [(c.kind, c.nbytes) for c in calls] == [("all_reduce", tokens * 4)] * 3 + [
        ("all_reduce", tokens * 4096 * 4)  # backward: the head's input gradient (copy_to_tp_region)
    ]
    assert stage.head.weight.shape == (51200 // 8, 4096) and stage.head.weight.shared_embedding


# ------------------------------------------------------------------------------------------------
# every model: pipeline stages built alone run forward + backward on meta


@pytest.mark.parametrize("name", sorted(MODELS))
def test_single_stage_forward_backward_on_meta(name: str) -> None:
    spec = MODELS[name]
    place()  # tp = pp = 1 (the tensor-parallel variants: next test)
    module = build_stage(spec, seq_len=seq_for(spec))
    loss, inputs = run_stage(module, spec, 2, seq_for(spec))
    assert loss.shape == () and loss.dtype == torch.float32 and loss.is_meta
    first = next(iter(module.layers.values()))
    assert all(p.grad is not None for p in first.parameters())
    assert module.embedding is not None and module.head is not None
    assert len(inputs) == len(module.input_names)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_pipeline_stages_forward_backward_on_meta(name: str) -> None:
    spec = MODELS[name]
    tp = tp_for(spec)
    sp = spec.family != "vit"  # 197 ViT tokens do not split over tp
    seq = seq_for(spec)
    per_stage = spec.layers // 4
    for rank in (0, 1, 3):
        place(tp=tp, pp=4, pp_rank=rank, sequence_parallel=sp)
        module = build_stage(spec, seq_len=seq)
        assert list(module.layer_range) == list(range(rank * per_stage, (rank + 1) * per_stage))
        assert module.parameters_total == count_parameters(spec, tp)
        out, inputs = run_stage(module, spec, 1, seq)
        if rank == 3:
            assert out.shape == () and module.embedding is None
        else:
            assert out.shape == ((seq // tp if sp else seq), 1, spec.hidden)
            assert (module.embedding is not None) == (rank == 0) and module.head is None
        if rank > 0:
            hidden = inputs[0]
            assert hidden.requires_grad and hidden.grad is not None and hidden.grad.shape == hidden.shape


def test_stage_inputs() -> None:
    spec = MODELS["bert-large"]
    place(tp=2, pp=2, pp_rank=0, sequence_parallel=True)
    first = build_stage(spec, seq_len=128)
    ids, types = stage_inputs(spec, first, 4, 128)
    assert ids.shape == types.shape == (4, 128) and ids.dtype == torch.long and ids.is_meta
    place(tp=2, pp=2, pp_rank=1, sequence_parallel=True)
    last = build_stage(spec, seq_len=128)
    hidden, mlm, nsp = stage_inputs(spec, last, 4, 128)
    assert hidden.shape == (64, 4, 1024) and hidden.requires_grad
    assert mlm.shape == (4, 128) and nsp.shape == (4,)
    assert last.input_names == ("hidden", "mlm_labels", "nsp_labels")
    vit = MODELS["vit-base"]
    place()
    images, labels = stage_inputs(vit, build_stage(vit, seq_len=197), 3, 197)
    assert images.shape == (3, 3, 224, 224) and labels.shape == (3,)
    assert tokens_per_sample(vit, 197) == 197 and tokens_per_sample(spec, 128) == 128


# ------------------------------------------------------------------------------------------------
# activation recomputation through the device-tensor wrapper


@pytest.fixture
def device_recorder() -> Iterator[Recorder]:
    recorder = Recorder()
    dt.hooks.on_op, dt.hooks.on_alloc, dt.hooks.meta_mode = recorder.on_op, None, False
    _push_mode(dt.DeviceMode())
    try:
        yield recorder
    finally:
        _pop_mode()
        dt.hooks.on_op = None
        dt.hooks.meta_mode = False


@pytest.mark.parametrize("name", ["gpt3-6.7b", "llama3.1-8b"])
def test_recompute_runs_each_layers_forward_again_in_backward(device_recorder: Recorder, name: str) -> None:
    spec = dataclasses.replace(MODELS[name], layers=8)  # a middle stage of 2 layers: all of it is layers
    measured = {}
    for recompute in (False, True):
        rec = place(tp=8, pp=4, pp_rank=1)
        module = build_stage(spec, seq_len=256, recompute="full" if recompute else "none").to(dt.DEVICE)
        (hidden,) = stage_inputs(spec, module, 1, 256)
        hidden = hidden.to(dt.DEVICE)
        device_recorder.take()
        out = module(hidden)
        assert isinstance(out, dt.NeuronTensor) and dt.unwrap(out).is_meta
        forward = device_recorder.take()
        forward_calls = rec.take()
        out.float().sum().backward()
        backward = [op for op in device_recorder.take() if op.name != dt.DEVICE_TO_HOST]
        measured[recompute] = (forward, backward, forward_calls, rec.take())
        assert module.layers["2"].mlp.up.weight.grad is not None
    fwd, bwd, fwd_calls, bwd_calls = measured[False]
    fwd_rc, bwd_rc, fwd_calls_rc, bwd_calls_rc = measured[True]

    def flops(ops: list) -> int:
        return sum(op.flops for op in ops)

    assert flops(fwd_rc) == flops(fwd) > 0
    assert flops(bwd_rc) == flops(bwd) + flops(fwd)  # the forward again, then the same backward
    matmuls = Counter(op.name for op in fwd if op.flops)
    assert Counter(op.name for op in bwd_rc if op.flops) == Counter(op.name for op in bwd if op.flops) + matmuls
    assert fwd_calls_rc == fwd_calls and len(fwd_calls) == 4
    assert Counter(bwd_calls_rc) == Counter(bwd_calls) + Counter(fwd_calls)  # forward all-reduces re-run


# ------------------------------------------------------------------------------------------------
# configuration errors


@pytest.mark.parametrize(
    ("name", "overrides", "tp", "pp", "seq", "sp", "message"),
    [
        ("gpt3-6.7b", {}, 3, 1, 2048, False, "32 attention heads do not split over tensor-parallel size 3"),
        ("llama2-7b", {"heads": 12, "kv_heads": 4, "hidden": 768}, 6, 1, 128, False, "key/value heads"),
        ("llama2-7b", {"vocab": 32001}, 2, 1, 128, False, "vocabulary of 32001"),
        ("llama2-7b", {"ffn": 11001}, 2, 1, 128, False, "FFN size 11001"),
        ("gpt3-6.7b", {}, 8, 5, 2048, False, "32 layers do not split evenly over 5 pipeline stages"),
        ("gpt3-6.7b", {}, 8, 4, 4096, False, "sequence length 4096 is outside 1..2048"),
        ("llama2-7b", {}, 8, 1, 100, True, "sequence parallelism needs the sequence length"),
        ("vit-base", {}, 4, 1, 196, False, "fixed by the image size"),
        ("gpt3-6.7b", {}, 0, 1, 2048, False, "at least 1"),
    ],
)
def test_bad_configurations_raise_one_line(
    name: str, overrides: dict, tp: int, pp: int, seq: int, sp: bool, message: str
) -> None:
    spec = dataclasses.replace(MODELS[name], **overrides)
    with pytest.raises(ValueError, match=message) as err:
        validate(spec, tp, pp, seq, sequence_parallel=sp)
    assert "\n" not in str(err.value) and str(err.value).startswith(spec.name)
    if tp >= 1:
        place(tp=tp, pp=pp, sequence_parallel=sp)
        with pytest.raises(ValueError, match=message):
            build_stage(spec, seq_len=seq)


# ------------------------------------------------------------------------------------------------
# real values on small configurations


def tiny(name: str, **overrides: object) -> ModelSpec:
    base = MODELS[name]
    sizes: dict[str, object] = {"layers": 2, "hidden": 32, "heads": 4, "kv_heads": 4, "ffn": 64}
    if base.family == "vit":
        sizes |= {"image_size": 32, "patch_size": 8, "max_seq_len": 17, "default_seq_len": 17, "num_classes": 10}
    else:
        sizes |= {"vocab": 256, "max_seq_len": 16, "default_seq_len": 16}
    return dataclasses.replace(base, **(sizes | overrides))


TINY = {
    "gpt": tiny("gpt3-6.7b"),
    "bert": tiny("bert-large"),
    "llama-gqa": tiny("llama3.1-8b", kv_heads=2),
    "llama-mqa": tiny("llama2-70b", kv_heads=1),
    "vit": tiny("vit-base"),
}


def cpu_inputs(spec: ModelSpec, module: StageModule, seed: int = 1) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(seed)
    inputs = stage_inputs(spec, module, 3, spec.default_seq_len, device="cpu")
    if spec.family == "bert" and module.last:
        inputs[-2][:, ::2] = IGNORE_INDEX  # MLM labels on half the positions
    return inputs


def cpu_stage(spec: ModelSpec, state: dict[str, torch.Tensor] | None = None, **placement: object) -> StageModule:
    place(**placement)
    torch.manual_seed(0)
    module = build_stage(spec, seq_len=spec.default_seq_len, device="cpu").eval()  # eval: no dropout
    if state is not None:
        module.load_state_dict({k: state[k] for k in module.state_dict()})
    return module


class Reference(NamedTuple):
    """One training step of a whole tiny model on the CPU (tp = pp = 1): what split stages must match."""

    spec: ModelSpec
    module: StageModule  # its parameters hold their gradients
    inputs: tuple[torch.Tensor, ...]
    loss: torch.Tensor
    state: dict[str, torch.Tensor]  # the weights, for the split stages to load


def reference_step(kind: str) -> Reference:
    spec = TINY[kind]
    full = cpu_stage(spec)
    inputs = cpu_inputs(spec, full)
    loss = full(*inputs)
    loss.backward()
    return Reference(spec, full, inputs, loss, full.state_dict())


def test_tiny_gpt_matches_the_real_math_gpt() -> None:
    spec = TINY["gpt"]
    stage = cpu_stage(spec)
    ids, labels = cpu_inputs(spec, stage)
    ref = GPT(TransformerConfig(vocab_size=256, n_layers=2, d_model=32, n_heads=4, max_seq_len=16, d_ff=64))
    names = {"tokens.weight": "embedding.word.weight", "positions.weight": "embedding.position"}
    names |= {"ln_f.weight": "head.norm.weight", "ln_f.bias": "head.norm.bias"}
    parts = {"ln1": "norm1", "ln2": "norm2", "attn.qkv": "attention.qkv", "attn.out": "attention.out"}
    parts |= {"ff.up": "mlp.up", "ff.down": "mlp.down"}
    for key in ref.state_dict():
        if key.startswith("blocks."):
            _, i, rest = key.split(".", 2)
            module, leaf = rest.rsplit(".", 1)
            names[key] = f"layers.{i}.{parts[module]}.{leaf}"
    ours = stage.state_dict()
    ref.load_state_dict({k: ours[v] for k, v in names.items()})
    loss, ref_loss = stage(ids, labels), ref.loss(ids, labels)
    torch.testing.assert_close(loss, ref_loss)
    loss.backward()
    ref_loss.backward()
    grads = dict(ref.named_parameters())
    for k, v in names.items():
        torch.testing.assert_close(stage.get_parameter(v).grad, grads[k].grad, msg=k)


@pytest.mark.parametrize("kind", ["llama-gqa", "llama-mqa"])
def test_tiny_llama_matches_a_reference_with_pytorch_sdpa(kind: str) -> None:
    spec = TINY[kind]
    stage = cpu_stage(spec)
    ids, labels = cpu_inputs(spec, stage)
    p = dict(stage.named_parameters())
    hd, heads, kv = spec.head_dim, spec.heads, spec.kv_heads
    b, s = ids.shape

    def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + spec.norm_eps))

    angles = torch.outer(torch.arange(s, dtype=torch.float32), stage.rotary.inv_freq)
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()

    def rope(x: torch.Tensor) -> torch.Tensor:  # [b, heads, s, hd]
        return x * cos + torch.cat([-x[..., hd // 2 :], x[..., : hd // 2]], -1) * sin

    h = F.embedding(ids, p["embedding.word.weight"])
    for i in range(spec.layers):
        x = rms(h, p[f"layers.{i}.norm1.weight"])
        q, k, v = F.linear(x, p[f"layers.{i}.attention.qkv.weight"]).split([heads * hd, kv * hd, kv * hd], -1)
        q = rope(q.view(b, s, heads, hd).transpose(1, 2))
        k = rope(k.view(b, s, kv, hd).transpose(1, 2))
        v = v.view(b, s, kv, hd).transpose(1, 2)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        h = h + F.linear(att.transpose(1, 2).reshape(b, s, heads * hd), p[f"layers.{i}.attention.out.weight"])
        gate, up = F.linear(rms(h, p[f"layers.{i}.norm2.weight"]), p[f"layers.{i}.mlp.up.weight"]).chunk(2, -1)
        h = h + F.linear(F.silu(gate) * up, p[f"layers.{i}.mlp.down.weight"])
    logits = F.linear(rms(h, p["head.norm.weight"]), p["head.output.weight"])
    ref = F.cross_entropy(logits.reshape(-1, spec.vocab), labels.reshape(-1))
    torch.testing.assert_close(stage(ids, labels), ref)


def test_llama3_rope_scaling_keeps_high_frequencies_and_divides_low_ones() -> None:
    spec = MODELS["llama3.1-8b"]
    place()
    small = dataclasses.replace(spec, layers=1, hidden=256, heads=2, kv_heads=2, ffn=64, vocab=64)  # head_dim 128
    stage = build_stage(small, seq_len=16, device="cpu")
    plain = 1.0 / spec.rope_theta ** (torch.arange(0, 128, 2, dtype=torch.float32) / 128)
    scaled = stage.rotary.inv_freq
    assert torch.equal(scaled[:8], plain[:8])  # wavelengths below 8192 / 4
    torch.testing.assert_close(scaled[-4:], plain[-4:] / 8.0)  # wavelengths above 8192


@pytest.mark.parametrize("kind", sorted(TINY))
def test_pipeline_split_computes_the_same_loss_and_gradients(kind: str) -> None:
    spec, full, inputs, loss, state = reference_step(kind)
    first = cpu_stage(spec, state, pp=2, pp_rank=0)
    last = cpu_stage(spec, state, pp=2, pp_rank=1)
    n_first = len(first.input_names)
    activation = first(*inputs[:n_first])
    received = activation.detach().requires_grad_()
    split_loss = last(received, *inputs[n_first:])
    torch.testing.assert_close(split_loss, loss)
    split_loss.backward()
    activation.backward(received.grad)
    grads = {n: p.grad for n, p in first.named_parameters()} | {n: p.grad for n, p in last.named_parameters()}
    for name, p in full.named_parameters():
        if name == "embedding.word.weight" and "head.weight" in grads:  # tied: both stages' shares
            torch.testing.assert_close(grads[name] + grads["head.weight"], p.grad)
        else:
            torch.testing.assert_close(grads[name], p.grad, msg=name)


def _shard(spec: ModelSpec, name: str, full: torch.Tensor, local: torch.Tensor, rank: int, tp: int) -> torch.Tensor:
    """This rank's part of a full (tp = 1) tensor, in the layout the stage uses."""
    if full.shape == local.shape:
        return full
    if name.endswith(("attention.out.weight", "mlp.down.weight")):  # row-parallel
        return full.chunk(tp, dim=1)[rank]
    if ".attention.qkv." in name:
        hd = spec.head_dim
        q, k, v = full.split([spec.heads * hd, spec.kv_heads * hd, spec.kv_heads * hd])
        if spec.kv_heads % tp == 0:
            k, v = k.chunk(tp)[rank], v.chunk(tp)[rank]
        else:  # one replicated KV head per rank: the one of this rank's query heads
            head = rank // (tp // spec.kv_heads)
            k, v = k[head * hd : (head + 1) * hd], v[head * hd : (head + 1) * hd]
        return torch.cat([q.chunk(tp)[rank], k, v])
    if name.endswith("mlp.up.weight") and spec.activation == "swiglu":
        gate, up = full.chunk(2)
        return torch.cat([gate.chunk(tp)[rank], up.chunk(tp)[rank]])
    return full.chunk(tp)[rank]  # column-parallel rows, vocabulary rows


@pytest.mark.parametrize("kind", sorted(TINY))
def test_tensor_parallel_ranks_compute_the_same_loss_as_one(kind: str) -> None:
    spec, full, inputs, loss, state = reference_step(kind)
    full_grads = {n: p.grad for n, p in full.named_parameters()}
    tp = 2
    threaded = ThreadedCommunicator(tp)
    set_communicator(threaded)  # type: ignore[arg-type]

    def rank_fn(rank: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        torch.manual_seed(0)
        module = build_stage(spec, seq_len=spec.default_seq_len, device="cpu").eval()
        local = module.state_dict()
        module.load_state_dict({k: _shard(spec, k, state[k], local[k], rank, tp) for k in local})
        out = module(*inputs)
        out.backward()
        return out.detach(), {n: p.grad for n, p in module.named_parameters()}

    results = threaded.run(rank_fn)
    for rank_loss, _ in results:
        torch.testing.assert_close(rank_loss, loss.detach())
    grads = [g for _, g in results]
    for name in ("layers.1.norm2.weight", "layers.0.attention.out.bias", "head.norm.weight"):
        if name in full_grads:  # replicated parameters: every rank has the whole gradient
            for g in grads:
                torch.testing.assert_close(g[name], full_grads[name], msg=name)
    name = "layers.0.mlp.down.weight"  # row-parallel: the ranks' column blocks
    torch.testing.assert_close(torch.cat([g[name] for g in grads], dim=1), full_grads[name])
