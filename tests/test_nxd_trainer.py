"""neuronx-distributed's trainer API under ``neuron-emulator exec`` (docs/run-your-script.md §NxD
trainer): config, model and optimizer wrappers, NeuronZero1Optimizer with FP32 gradient
accumulation, activation checkpointing, trainer checkpoints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from emulator.compat.gaps import NotEmulatedError
from emulator.compat.nxd_kernels import apply_rotary_pos_emb, nki_flash_attn_func
from emulator.compat.nxd_trainer import neuronx_distributed_config
from emulator.compat.nxd_trainer_checkpoint import _read, _write
from tests.support import reap, wait_until
from tests.test_run_your_script import exec_run, exec_start, losses, monitor_report, torchrun

_RANK = re.compile(r"rank (\d) optimizer-state elements (\d+) grad-norm (\d+\.\d+)")


def test_config_defaults_follow_zero1() -> None:
    plain = neuronx_distributed_config(tensor_parallel_size=2)
    assert plain["optimizer_config"] == {"zero_one_enabled": False, "grad_clipping": True, "max_grad_norm": 1.0}
    assert plain["mixed_precision_config"]["use_master_weights"] is False
    zero1 = neuronx_distributed_config(optimizer_config={"zero_one_enabled": True, "grad_clipping": False})
    assert "max_grad_norm" not in zero1["optimizer_config"]
    assert zero1["mixed_precision_config"] == {
        "use_master_weights": True,
        "use_fp32_grad_acc": True,
        "use_master_weights_in_ckpt": False,
    }


@pytest.mark.parametrize(
    "asked",
    [{"pipeline_parallel_size": 2}, {"context_parallel_size": 2}, {"expert_parallel_size": 2}, {"pad_model": True}],
)
def test_config_refuses_what_is_not_emulated(asked: dict) -> None:
    with pytest.raises(NotEmulatedError, match="neuronx_distributed_config"):
        neuronx_distributed_config(**asked)


def test_config_meta_init_needs_an_init_function() -> None:
    with pytest.raises(ValueError, match="param_init_fn"):
        neuronx_distributed_config(model_init_config={"meta_device_init": True})


@pytest.mark.parametrize("xser", [False, True])
def test_checkpoint_files_round_trip(tmp_path: Path, xser: bool) -> None:
    state = {"w": torch.arange(6.0).reshape(2, 3), "nested": {"step": 3, "m": [torch.ones(2)]}}
    path = tmp_path / "model" / "dp_rank_00_tp_rank_00_pp_rank_00.pt"
    _write(state, path, xser)
    assert (path.with_name(path.name + ".tensors") / "tensor_1.pt").is_file() is xser
    back = _read(path)
    assert torch.equal(back["w"], state["w"]) and back["nested"]["step"] == 3
    assert torch.equal(back["nested"]["m"][0], torch.ones(2))


def _plain_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    causal = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
    return torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1) @ v


def test_flash_kernel_is_causal_attention_in_both_layouts() -> None:
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 2048, 16, generator=gen) for _ in range(3))
    expected = _plain_attention(q, k, v)
    plain = nki_flash_attn_func(q, k, v, transpose_nki_inputs=False)
    transposed = nki_flash_attn_func(*(t.transpose(-1, -2) for t in (q, k, v)))  # (b, h, d, s) in
    assert plain.shape == transposed.shape == (1, 2, 2048, 16)  # (b, h, s, d) out
    assert torch.allclose(plain, expected, atol=1e-5) and torch.allclose(transposed, expected, atol=1e-5)
    with pytest.raises(NotImplementedError, match="multiples of 2K"):
        nki_flash_attn_func(q[:, :, :1024], k[:, :, :1024], v[:, :, :1024], transpose_nki_inputs=False)


def test_rotary_embedding_agrees_across_layouts() -> None:
    gen = torch.Generator().manual_seed(4)
    q, k = torch.randn(2, 3, 8, 4, generator=gen), torch.randn(2, 3, 8, 4, generator=gen)  # (b, h, s, d)
    angle = torch.arange(8.0)[:, None] * torch.tensor([1.0, 0.1, 1.0, 0.1])
    cos, sin = angle.cos().expand(2, 8, 4), angle.sin().expand(2, 8, 4)
    q1, k1 = apply_rotary_pos_emb(q, k, cos, sin, None, False)
    q2, k2 = apply_rotary_pos_emb(q.transpose(-1, -2), k.transpose(-1, -2), cos, sin, None, True, True)
    assert torch.allclose(q2.transpose(-1, -2), q1) and torch.allclose(k2.transpose(-1, -2), k1)
    # a rotation: each pair (x_i, x_{i+d/2}) keeps its length
    pairs = lambda t: t[..., :2] ** 2 + t[..., 2:] ** 2  # noqa: E731
    assert torch.allclose(pairs(q1), pairs(q), atol=1e-6)


def _run(daemon, *args: str, nproc: int) -> tuple[list[float], list[tuple[int, int, float]], str]:
    done = exec_run(daemon, torchrun("nxd_trainer_llama.py", "--dtype", "fp32", *args, nproc=nproc), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = sorted((int(r), int(n), float(g)) for r, n, g in _RANK.findall(done.stdout))
    assert len(ranks) == nproc, done.stdout[-2000:]
    return losses(done.stdout), ranks, done.stdout


def _tensors_by_core(report: dict) -> dict[str, int]:
    found = {}
    for runtime in report.get("neuron_runtime_data", []):
        usage = runtime["report"].get("memory_used", {}).get("neuron_runtime_used_bytes", {})
        for core, kinds in usage.get("usage_breakdown", {}).get("neuroncore_memory_usage", {}).items():
            found[core] = kinds["tensors"]
    return found


def _held_run(daemon, tmp: Path, *args: str) -> tuple[list[float], list[tuple[int, int, float]], str]:
    """The 4-process run, held attached after training while neuron-monitor reads every core's
    device memory: each core's tensors hold its ZeRO-1 share of the optimizer state — at least
    the moments and master shards the rank reports, less than a whole TP shard's two moments."""
    out, cue = tmp / "out.txt", tmp / "seen"
    proc = exec_start(
        daemon, torchrun("nxd_trainer_llama.py", "--dtype", "fp32", "--stay_until", str(cue), *args, nproc=4), out
    )
    try:
        held = re.compile(r"rank (\d) optimizer bytes (\d+) model elements (\d+)")
        assert wait_until(lambda: len(held.findall(out.read_text())) == 4 or proc.poll() is not None, 240, 0.5)
        shares = {int(r): (int(b), int(n)) for r, b, n in held.findall(out.read_text())}
        report = monitor_report(daemon, lambda r: len(_tensors_by_core(r)) == 4)
        assert report is not None
        for core, tensors in _tensors_by_core(report).items():
            state_bytes, elements = shares[int(core)]  # rank r runs on NeuronCore r
            assert state_bytes <= tensors < 2 * elements * 4, (core, tensors, state_bytes, elements)
        cue.touch()
        assert proc.wait(timeout=120) == 0, out.read_text()[-3000:]
    finally:
        reap(proc)
    text = out.read_text()
    ranks = sorted((int(r), int(n), float(g)) for r, n, g in _RANK.findall(text))
    return losses(text), ranks, text


def test_tp2_sequence_parallel_zero1_trains_as_one_process(daemon_factory, short_tmp: Path) -> None:
    """TP2 x DP2 with sequence parallelism, ZeRO-1 (FP32 master weights and FP32 gradient
    accumulation over 2 micro-batches) and the attention core checkpointed trains exactly as one
    process with plain AdamW and the same clipping; each rank holds a quarter of the optimizer
    state; the trainer checkpoint (xser) is laid out as NxD's and loads back."""
    daemon = daemon_factory("trn1.32xlarge")
    # both project Q, K, V with NxD's GQA QKV layer (the sample's default): TP1 holds all of it
    one, (ref,), _ = _run(daemon, "--tensor_parallel_size", "1", "--zero1", "0", "--sequence_parallel", "0", nproc=1)
    ckpt = short_tmp / "ckpt"
    four, ranks, out = _held_run(daemon, short_tmp, "--tensor_parallel_size", "2", "--ckpt", str(ckpt))
    assert len(one) == 6 and one[-1] < 0.8 * one[0]
    assert four == pytest.approx(one, rel=1e-5)
    assert [g for _, _, g in ranks] == pytest.approx([ref[2]] * 4, rel=1e-4)  # the same global norm
    # a quarter of AdamW's moments per rank (TP halves every weight, ZeRO-1 the rest), plus padding
    assert all(n == ranks[0][1] for _, n, _ in ranks) and ref[1] / 4 <= ranks[0][1] < ref[1] / 4 * 1.01
    assert "checkpoint restored True has_checkpoint True" in out
    tag = ckpt / "step_final"
    assert {p.name for p in (tag / "model").glob("*.pt")} == {
        "dp_rank_00_tp_rank_00_pp_rank_00.pt",
        "dp_rank_00_tp_rank_01_pp_rank_00.pt",
    }
    assert len(list((tag / "optim").glob("dp_rank_0?_tp_rank_0?_pp_rank_00.pt"))) == 4  # every ZeRO-1 shard
    assert (tag / "done").is_file() and (tag / "user_content.pt").is_file()
