"""torch_xla's FSDP under ``neuron-emulator exec`` (docs/run-your-script.md §FSDP).

End to end: ``tests/samples/fsdp_mlp_torchrun.py`` on two NeuronCores trains as plain data
parallelism does (gradients averaged, the global norm clipped), each rank holding half the
optimizer state, and the consolidated checkpoint is the trained full model. In process (one rank,
on the host): the sharding layouts, nesting, checkpointing, ``compute_dtype`` and consolidation.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from emulator.compat import fsdp, fsdp_shard
from emulator.compat.fsdp import XlaFullyShardedDataParallel as FSDP
from emulator.compat.fsdp_shard import predivide_factor
from emulator.compat.fsdp_state import checkpoint_module, consolidate_sharded_state_dicts
from emulator.compat.fsdp_wrap import recursive_wrap, size_based_auto_wrap_policy, transformer_auto_wrap_policy
from emulator.compat.gaps import NotEmulatedError
from tests.test_run_your_script import exec_run, losses, torchrun

RANK_LINE = r"rank (\d) weights (-?\d+\.\d+) optimizer-state elements (\d+)"


# -- end to end: two ranks ------------------------------------------------------------------------
def _run(daemon, *args: str) -> tuple[str, list[float], list[float], list[int]]:
    done = exec_run(daemon, torchrun("fsdp_mlp_torchrun.py", "--steps", "4", *args))
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = sorted(re.findall(RANK_LINE, done.stdout))
    assert len(ranks) == 2, done.stdout[-2000:]
    return done.stdout, losses(done.stdout), [float(w) for _, w, _ in ranks], [int(n) for _, _, n in ranks]


def _check_consolidated(text: str, ckpt: Path, plain_path: Path) -> None:
    assert "consolidated 6 tensors, names and shapes as the unwrapped model's: True" in text, text[-2000:]
    full = torch.load(ckpt / "consolidated.pth")["model"]
    plain = torch.load(plain_path)
    assert sorted(full) == sorted(plain)
    for name, value in plain.items():
        assert full[name].shape == value.shape and full[name].dtype == value.dtype
        torch.testing.assert_close(full[name], value, rtol=1e-5, atol=1e-6, msg=name)


def test_fsdp_trains_as_plain_data_parallelism_with_half_the_optimizer_state(daemon, short_tmp: Path) -> None:
    _, pl, pw, pn = _run(daemon, "--fsdp", "0", "--ckpt", str(short_tmp))
    assert len(pl) == 4 and pl[-1] < pl[0] and pw[0] == pw[1]
    assert pn == [3434, 3434]  # AdamW's two moments of the 1,717 parameters
    # shard_param_on_dim_0: each rank's rows of every parameter, dim 0 padded to a multiple of 2
    # (901 of the 1,717 per rank); flatten_parameters: one flat tensor per FSDP module (561, 1,122
    # and 34 parameters), each padded to a multiple of 2 x 128 (384 + 640 + 128 per rank)
    for layout, held in (("0", 2 * 901), ("1", 2 * 1152)):
        ckpt = short_tmp / f"flatten-{layout}"
        ckpt.mkdir()
        text, fl, fw, fn = _run(daemon, "--fsdp", "1", "--flatten", layout, "--ckpt", str(ckpt))
        assert fl == pytest.approx(pl, rel=1e-5)
        assert fw[0] + fw[1] == pytest.approx(pw[0], rel=1e-5)  # the shards add up to the trained model
        assert fn == [held, held]
        _check_consolidated(text, ckpt, short_tmp / "plain.pth")


# -- in process: one rank on the host --------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.lin = nn.Linear(d_in, d_out)
        self.norm = nn.BatchNorm1d(d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.norm(self.lin(x)))


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(Block(16, 33), Block(33, 33), nn.Linear(33, 1))


@pytest.fixture
def on_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """FSDP's shards on the host instead of the process's NeuronCore: one rank, no daemon."""
    monkeypatch.setattr(fsdp, "_device", lambda: torch.device("cpu"))
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)


def _wrapped(**options: object) -> FSDP:
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
    return FSDP(_model(), auto_wrap_policy=policy, **options)  # type: ignore[arg-type]


LAYOUTS = [
    {},
    {"flatten_parameters": True},
    {"shard_param_on_dim_0": True},
    {"reshard_after_forward": False},
    {"disable_reshard_on_root": False},
    {"auto_wrapper_callable": lambda m, *a, **kw: FSDP(checkpoint_module(m), *a, **kw)},
]


@pytest.mark.usefixtures("on_host")
@pytest.mark.parametrize("options", LAYOUTS, ids=lambda o: ",".join(o) or "default")
def test_one_rank_trains_as_the_module_and_consolidates_to_it(options: dict) -> None:
    ref, model = _model(), _wrapped(**options)
    ref_opt, opt = torch.optim.AdamW(ref.parameters(), lr=0.01), torch.optim.AdamW(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 16, generator=gen), torch.randn(8, 1, generator=gen)
    for _ in range(3):
        for net, optimizer in ((ref, ref_opt), (model, opt)):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(net(x), y)
            loss.backward()
            optimizer.step()
            net.loss = loss.item()  # type: ignore[assignment]
        assert model.loss == pytest.approx(ref.loss, rel=1e-6)
    assert all(u.full is None for m in model.modules() if isinstance(m, FSDP) for u in m._units)  # all freed
    full = consolidate_sharded_state_dicts([model.state_dict()], model.get_shard_metadata())
    assert sorted(full) == sorted(ref.state_dict())
    # a checkpointed block's recomputation updates BatchNorm's running statistics a second time
    names = dict(ref.named_parameters()) if "auto_wrapper_callable" in options else ref.state_dict()
    for name, value in names.items():
        torch.testing.assert_close(full[name], value.detach(), rtol=1e-6, atol=1e-7, msg=name)


@pytest.mark.usefixtures("on_host")
@pytest.mark.parametrize(("options", "forward", "backward"), [({}, 10, 8), ({"reshard_after_forward": False}, 10, 0)])
def test_backward_gathers_again_what_forward_freed(
    monkeypatch: pytest.MonkeyPatch, options: dict, forward: int, backward: int
) -> None:
    model = _wrapped(**options)  # two inner FSDP blocks of 4 parameters each (linear, norm); the head 2
    gathers: list[int] = []
    real_gather = fsdp_shard.xm.all_gather
    monkeypatch.setattr(fsdp_shard.xm, "all_gather", lambda *a, **kw: gathers.append(1) or real_gather(*a, **kw))
    out = model(torch.randn(8, 16))
    inner = [m for m in model.modules() if isinstance(m, FSDP) and m is not model]
    assert len(gathers) == forward
    assert all((u.full is None) == model.module[0].reshard_after_forward for m in inner for u in m._units)
    out.sum().backward()
    assert len(gathers) == forward + backward
    assert all(u.full is None for m in model.modules() if isinstance(m, FSDP) for u in m._units)


@pytest.mark.usefixtures("on_host")
def test_shards_stay_fp32_while_the_gathered_parameters_compute_in_bf16() -> None:
    model = _wrapped(compute_dtype=torch.bfloat16, fp32_reduce_scatter=True)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert model.module[0].module.norm.running_var.dtype == torch.bfloat16  # buffers follow compute_dtype
    out = model(torch.randn(8, 16))  # inputs are cast to compute_dtype
    assert out.dtype == torch.bfloat16
    out.float().pow(2).mean().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in model.parameters())
    meta = model.get_shard_metadata()
    full = consolidate_sharded_state_dicts([model.state_dict()], meta)
    assert full["0.norm.running_var"].dtype == torch.float32  # back to the original dtype
    norm = model.clip_grad_norm_(1e-3)
    assert norm > 1e-3
    total = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))  # type: ignore[union-attr]
    assert total == pytest.approx(1e-3, rel=1e-3)


@pytest.mark.usefixtures("on_host")
def test_what_is_not_emulated_or_not_allowed_says_so() -> None:
    with pytest.raises(NotEmulatedError, match="_debug_dummy_all_gather_op"):
        FSDP(_model(), _debug_dummy_all_gather_op=True)
    with pytest.raises(TypeError, match="only fp32 parameters"):
        FSDP(_model().to(torch.bfloat16))
    with pytest.raises(ValueError, match="sharding_rank and sharding_world_size"):
        FSDP(_model(), sharding_groups=[[0]])
    with pytest.raises(RuntimeError, match="must define a `forward`"):
        FSDP(nn.ModuleList([nn.Linear(2, 2)]))


def test_wrap_policies_and_gradient_division() -> None:
    model = _model()
    wrapped: list[str] = []

    def wrapper(m: nn.Module, **kwargs: object) -> nn.Module:
        wrapped.append(type(m).__name__)
        return m

    policy = functools.partial(size_based_auto_wrap_policy, min_num_params=500)
    _, count = recursive_wrap(model, policy, wrapper, (), (), only_wrap_children=True)
    assert wrapped == ["Linear", "Linear"] and count == 561 + 1122  # a block's norm (66) is too small
    assert [predivide_factor(n) for n in (1, 2, 8, 32, 64)] == [1, 2, 4, 8, 8]


@pytest.mark.usefixtures("on_host")
def test_a_sharded_state_dict_loads_back_and_is_gathered_again() -> None:
    trained, fresh = _wrapped(), _wrapped()
    x = torch.randn(8, 16)
    opt = torch.optim.AdamW(trained.parameters(), lr=0.1)
    trained(x).pow(2).mean().backward()
    opt.step()
    before = fresh(x).detach()  # the root keeps its gathered parameters (disable_reshard_on_root)
    fresh.load_state_dict(trained.state_dict())  # new shards: gathered again at the next forward
    after = fresh(x).detach()
    torch.testing.assert_close(after, trained(x).detach())
    assert not torch.allclose(before, after)


@pytest.mark.usefixtures("on_host")
def test_no_sync_accumulates_full_gradients_until_the_next_synced_backward() -> None:
    ref, model = _model(), _wrapped()
    batches = [torch.randn(8, 16) for _ in range(3)]
    for x in batches:
        ref(x).pow(2).mean().backward()
    with model.no_sync():
        for x in batches[:2]:
            model(x).pow(2).mean().backward()
    assert all(p.grad is None for p in model.parameters())  # nothing reduce-scattered yet
    model(batches[2]).pow(2).mean().backward()
    sharded = dict(model.get_original_names_and_sharded_parameters())
    for name, param in ref.named_parameters():
        grad = sharded[name].grad
        assert grad is not None
        torch.testing.assert_close(grad[: param.numel()].view(param.shape), param.grad, msg=name)


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb, self.out = nn.Embedding(10, 6), nn.Linear(6, 10, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(ids))


@pytest.mark.usefixtures("on_host")
def test_a_tied_weight_is_sharded_once_and_gets_both_gradients() -> None:
    torch.manual_seed(0)
    ref = Tied()
    torch.manual_seed(0)
    model = FSDP(Tied(), flatten_parameters=True)
    ids = torch.tensor([1, 2, 3])
    ref(ids).sum().backward()
    model(ids).sum().backward()
    (shard,) = model.parameters()  # one flat unit of one parameter
    assert ref.emb.weight.grad is not None and shard.grad is not None
    torch.testing.assert_close(shard.grad[:60].view(10, 6), ref.emb.weight.grad)
    full = consolidate_sharded_state_dicts([model.state_dict()], model.get_shard_metadata())
    assert list(full) == ["emb.weight"]  # under its first name only, as torch_xla's
