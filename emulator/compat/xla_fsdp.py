"""``torch_xla.distributed.fsdp``: fully sharded data parallelism over the job's processes, with
real values and real collectives (docs/run-your-script.md §FSDP).

A wrapped module's own parameters (those no nested wrapper owns) become one flat vector, padded to
a multiple of the sharding group's size N; each rank keeps its 1/N slice as the module's only
parameter (``flat_param``, in the parameters' dtype), so an optimizer over ``model.parameters()``
holds 1/N of the state. Forward all-gathers the flat vector and gives each submodule views of it
as its parameters (in ``compute_dtype`` when given); backward reduce-scatters the flat gradient
into the shard, averaged over the group (torch_xla's pre/post-divide factors multiply to 1/N).
``auto_wrap_policy`` wraps submodules first (each owns its parameters), as torch_xla's does.
The all-gathered parameters stay alive until the backward is done (no re-gather): the memory a
real run frees after forward is not freed here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from emulator.compat import collectives, world
from emulator.compat.gaps import NotEmulatedError

_NAME = "torch_xla.distributed.fsdp.XlaFullyShardedDataParallel"
_SUPPORTED_DEFAULTS: dict[str, Any] = {
    "execute_sharding_on_init": True,
    "optimization_barrier_in_forward": True,
    "optimization_barrier_in_backward": True,
    "mark_step_on_finalization": False,
    "disable_reshard_on_root": True,
    "pin_layout": True,
    "sharding_rank": None,
    "sharding_world_size": None,
    "shard_param_on_dim_0": False,
    "use_all_gather_via_all_reduce": False,
    "flatten_parameters": True,
}


class _GatherScatter(torch.autograd.Function):
    """All-gather the shards forward; reduce-scatter the gradient (averaged) backward."""

    @staticmethod
    def forward(ctx: Any, shard: torch.Tensor, group: Any, reduce_dtype: Any) -> torch.Tensor:
        ctx.group, ctx.reduce_dtype, ctx.dtype = group, reduce_dtype, shard.dtype
        return group.all_gather(shard.detach(), 0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        g = grad.contiguous().to(ctx.reduce_dtype or ctx.dtype)
        return ctx.group.reduce_scatter(g, 0, "sum", 1.0 / ctx.group.size).to(ctx.dtype), None, None


def _owned(module: nn.Module) -> Iterator[tuple[nn.Module, str, str, nn.Parameter]]:
    """(submodule, attribute, dotted name, parameter) of the parameters no nested wrapper owns."""

    def walk(m: nn.Module, prefix: str) -> Iterator[tuple[nn.Module, str, str, nn.Parameter]]:
        for name, p in m._parameters.items():
            if p is not None:
                yield m, name, prefix + name, p
        for child_name, child in m._modules.items():
            if child is not None and not isinstance(child, XlaFullyShardedDataParallel):
                yield from walk(child, f"{prefix}{child_name}.")

    yield from walk(module, "")


def _apply_policy(module: nn.Module, policy: Callable[..., bool], wrap: Callable[[nn.Module], nn.Module]) -> None:
    """Wrap, bottom-up, every submodule the policy picks (torch_xla's recursive auto-wrap)."""
    for name, child in list(module.named_children()):
        if isinstance(child, XlaFullyShardedDataParallel):
            continue
        _apply_policy(child, policy, wrap)
        numel = sum(p.numel() for _, _, _, p in _owned(child))
        if policy(child, False, numel):
            setattr(module, name, wrap(child))


class XlaFullyShardedDataParallel(nn.Module):
    def __init__(
        self,
        module: nn.Module,
        compute_dtype: torch.dtype | None = None,
        buffer_dtype: torch.dtype | None = None,
        fp32_reduce_scatter: bool = False,
        sharding_groups: list[list[int]] | None = None,
        reshard_after_forward: bool = True,
        auto_wrap_policy: Callable[..., bool] | None = None,
        auto_wrapper_callable: Callable[..., nn.Module] | None = None,
        param_init_fn: Callable[[nn.Module], None] | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        for key, value in options.items():
            if key not in _SUPPORTED_DEFAULTS or (value != _SUPPORTED_DEFAULTS[key] and key != "pin_layout"):
                raise NotEmulatedError(f"{_NAME}({key}={value!r})")
        self.compute_dtype, self.fp32_reduce_scatter = compute_dtype, fp32_reduce_scatter
        self.reshard_after_forward = reshard_after_forward
        ranks = sharding_groups or [list(range(world.world_size()))]
        self.sharding_groups = [list(g) for g in ranks]
        self._group = collectives.group_among(self.sharding_groups if world.world_size() > 1 else None)
        self.world_size, self.rank = self._group.size, self._group.index
        if auto_wrap_policy is not None:
            kwargs: dict[str, Any] = {
                "compute_dtype": compute_dtype,
                "fp32_reduce_scatter": fp32_reduce_scatter,
                "sharding_groups": sharding_groups,
                "reshard_after_forward": reshard_after_forward,
            }

            def wrap(child: nn.Module) -> nn.Module:
                if auto_wrapper_callable is not None:
                    return auto_wrapper_callable(child, **kwargs)
                return XlaFullyShardedDataParallel(child, **kwargs)

            _apply_policy(module, auto_wrap_policy, wrap)
        if buffer_dtype is not None:
            for b_name, buf in list(module.named_buffers()):
                if buf.is_floating_point():
                    *path, leaf = b_name.split(".")
                    owner = module.get_submodule(".".join(path))
                    owner._buffers[leaf] = buf.to(buffer_dtype)
        self.module = module
        self._flatten()

    # -- sharding -----------------------------------------------------------------------------
    def _flatten(self) -> None:
        owned = list(_owned(self.module))
        self._views = [(m, attr, name, p.shape, p.numel()) for m, attr, name, p in owned]
        dtype = owned[0][3].dtype if owned else torch.float32
        flat = torch.cat([p.detach().reshape(-1).to(dtype) for *_, p in owned]) if owned else torch.zeros(0)
        self.numel = flat.numel()
        self.padding = (-self.numel) % self.world_size
        flat = F.pad(flat, [0, self.padding])
        shard_size = flat.numel() // self.world_size
        shard = flat[self.rank * shard_size : (self.rank + 1) * shard_size].clone()
        for m, attr, *_ in owned:
            del m._parameters[attr]
            setattr(m, attr, torch.empty(0, device=shard.device, dtype=dtype))
        self.flat_param = nn.Parameter(shard, requires_grad=any(p.requires_grad for *_, p in owned))

    def _gather(self) -> None:
        reduce_dtype = torch.float32 if self.fp32_reduce_scatter else None
        if self.world_size > 1:
            full = _GatherScatter.apply(self.flat_param, self._group, reduce_dtype)
        else:
            full = self.flat_param * 1.0
        if self.compute_dtype is not None:
            full = full.to(self.compute_dtype)
        offset = 0
        for m, attr, _, shape, n in self._views:
            setattr(m, attr, full[offset : offset + n].view(shape))
            offset += n

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self._gather()
        return self.module(*args, **kwargs)

    # -- gradient clipping ------------------------------------------------------------------------
    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0, groups: Any = None) -> torch.Tensor:
        """The global norm of the whole model's gradient (every shard, every rank), clipped."""
        if norm_type != 2.0:
            raise NotEmulatedError(f"{_NAME}.clip_grad_norm_(norm_type={norm_type})")
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        local = torch.zeros(1, dtype=torch.float32, device=self.flat_param.device)
        for g in grads:
            local += g.float().pow(2).sum()
        total = self._group.all_reduce(local, "sum") if self.world_size > 1 else local
        norm = total.sqrt()[0]
        coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype))
        return norm

    # -- checkpoints ----------------------------------------------------------------------------
    def get_shard_metadata(self) -> dict[str, Any]:
        """What ``consolidate_sharded_model_checkpoints`` needs: for each flat shard of this
        model's state dict, the original parameters it holds; each buffer's original name."""
        shards: dict[str, Any] = {}
        buffers: dict[str, str] = {}

        def visit(m: nn.Module, state: str, orig: str) -> None:
            if isinstance(m, XlaFullyShardedDataParallel):
                shards[state + "flat_param"] = {
                    "names": [orig + name for _, _, name, _, _ in m._views],
                    "shapes": [list(shape) for _, _, _, shape, _ in m._views],
                    "numel": m.numel,
                }
                visit(m.module, state + "module.", orig)
                return
            for name, buf in m._buffers.items():
                if buf is not None and name not in m._non_persistent_buffers_set:
                    buffers[state + name] = orig + name
            for name, child in m._modules.items():
                if child is not None:
                    visit(child, f"{state}{name}.", f"{orig}{name}.")

        visit(self, "", "")
        return {"shard_info": shards, "buffer_info": buffers, "world_size": self.world_size, "rank": self.rank}


def consolidate(shards: list[dict[str, Any]], metadata: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The full state dict from every rank's sharded state dict (in rank order) and the metadata."""
    full: dict[str, torch.Tensor] = {}
    for key, info in metadata["shard_info"].items():
        flat = torch.cat([s[key].reshape(-1) for s in shards])[: info["numel"]]
        offset = 0
        for name, shape in zip(info["names"], info["shapes"], strict=True):
            n = math.prod(shape)
            full[name] = flat[offset : offset + n].view(shape).clone()
            offset += n
    for key, name in metadata["buffer_info"].items():
        full[name] = shards[0][key]
    return full


def consolidate_sharded_model_checkpoints(
    ckpt_prefix: str, ckpt_suffix: str = "*.pth", save_path: str = "", save_model: bool = True
) -> tuple[dict[str, torch.Tensor], str]:
    """Every rank's ``{"model": state_dict, "shard_metadata": ...}`` file matching
    ``ckpt_prefix + ckpt_suffix``, merged into the full state dict (saved as ``{"model": ...}``)."""
    import glob

    paths = sorted(glob.glob(ckpt_prefix + ckpt_suffix))
    if not paths:
        raise FileNotFoundError(f"no checkpoint files match {ckpt_prefix + ckpt_suffix}")
    ckpts = [torch.load(p, map_location="cpu", weights_only=False) for p in paths]
    ckpts.sort(key=lambda c: c["shard_metadata"]["rank"])
    full = consolidate([c["model"] for c in ckpts], ckpts[0]["shard_metadata"])
    target = save_path or ckpt_prefix + "consolidated.pth"
    if save_model:
        torch.save({"model": full}, target)
    return full, target


def checkpoint_module(module: nn.Module) -> nn.Module:
    """``module`` whose forward is recomputed in the backward pass (activation checkpointing)."""
    inner = module.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        return torch.utils.checkpoint.checkpoint(inner, *args, use_reentrant=False, **kwargs)

    module.forward = forward
    return module


# -- wrap policies (torch_xla.distributed.fsdp.wrap) ---------------------------------------------
def size_based_auto_wrap_policy(
    module: nn.Module,
    recurse: bool,
    nonwrapped_numel: int,
    min_num_params: int = int(1e8),
    force_leaf_modules: set[type] | None = None,
    exclude_wrap_modules: set[type] | None = None,
) -> bool:
    """Wrap a submodule holding at least ``min_num_params`` parameters no inner wrapper owns."""
    if recurse:
        return not isinstance(module, tuple(force_leaf_modules or ()))
    excluded = tuple(exclude_wrap_modules or (nn.ModuleList, nn.ModuleDict))
    return nonwrapped_numel >= min_num_params and not isinstance(module, excluded)


def transformer_auto_wrap_policy(
    module: nn.Module, recurse: bool, nonwrapped_numel: int, transformer_layer_cls: set[type]
) -> bool:
    """Wrap every instance of the transformer layer classes."""
    return True if recurse else isinstance(module, tuple(transformer_layer_cls))
