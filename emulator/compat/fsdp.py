"""``torch_xla.distributed.fsdp.XlaFullyShardedDataParallel``: fully sharded data parallelism
(ZeRO-3) over the data-parallel ranks, with real values and real collectives between the
processes (docs/run-your-script.md §FSDP).

Wrapping shards the module's parameters (:mod:`emulator.compat.fsdp_shard`): each rank keeps a
1/N FP32 shard of every parameter (or of each module's flattened parameters) as the
``nn.Parameter`` s that ``parameters()`` returns, so an optimizer built on them holds 1/N of the
state per rank. ``forward`` all-gathers the full parameters (cast to ``compute_dtype``) over the
sharding group, runs the module, and frees them again (``reshard_after_forward``; not the root's
with ``disable_reshard_on_root``). Backward all-gathers a module's parameters again before its
gradients are computed; once a parameter's gradient is complete it is reduce-scattered into its
shard's ``.grad`` (FP32, added to what is there) and the full gradient and parameter are freed.
The gradient is averaged over the N ranks of the sharding group as torch_xla splits it: divided by
:func:`~emulator.compat.fsdp_shard.predivide_factor` before the sum, by N over that factor after.
``auto_wrap_policy`` (:mod:`emulator.compat.fsdp_wrap`) makes submodules FSDP modules of their own;
the outermost is the root, whose ``clip_grad_norm_`` clips the global norm of all shards.

The collectives are the ones ``xm.all_gather`` / ``xm.reduce_scatter`` / ``xm.all_reduce`` run
(costed on the job's links). Optimization barriers and ``_use_xla_patched_linear`` are compiler
matters in torch_xla: accepted, the values are the same. Bucketing (``reduce_scatter_bucket_size_mb``)
and ``coalesce_all_gather_ops`` change how collectives are grouped, not their values: accepted,
each tensor has its own collective here.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from emulator.compat import world
from emulator.compat import xla_model as xm
from emulator.compat.fsdp_shard import (
    FLOAT_DTYPES,
    WRAPPED,
    Collectives,
    FullParam,
    ShardUnit,
    predivide_factor,
    saved_views,
)
from emulator.compat.fsdp_support import cast_floats, materialize, private_options, tensors
from emulator.compat.fsdp_wrap import recursive_wrap


def _device() -> torch.device:
    """Where the shards live: this process's NeuronCore (``xla:0``)."""
    return xm.xla_device()


class XlaFullyShardedDataParallel(nn.Module):
    """``module`` with its parameters sharded over the sharding group (the module doc;
    docs/run-your-script.md §FSDP). Build the optimizer after wrapping, on ``parameters()``, and
    step it directly (not with ``xm.optimizer_step``, which would average the gradients again)."""

    def __init__(
        self,
        module: nn.Module,
        reshard_after_forward: bool = True,
        flatten_parameters: bool = False,
        execute_sharding_on_init: bool = True,
        optimization_barrier_in_forward: bool = True,
        optimization_barrier_in_backward: bool = True,
        sync_on_finalization: bool = False,
        disable_reshard_on_root: bool = True,
        compute_dtype: torch.dtype | None = None,
        buffer_dtype: torch.dtype | None = None,
        fp32_reduce_scatter: bool = False,
        sharding_groups: list[list[int]] | None = None,
        sharding_rank: int | None = None,
        sharding_world_size: int | None = None,
        shard_param_on_dim_0: bool = False,
        pin_layout_in_collective_ops: bool = True,
        reduce_scatter_bucket_size_mb: int | None = 0,
        coalesce_all_gather_ops: bool = False,
        auto_wrap_policy: Callable[..., bool] | None = None,
        auto_wrapper_callable: Callable[..., nn.Module] | None = None,
        param_init_fn: Callable[[nn.Module], None] | None = None,
        **private: Any,
    ) -> None:
        options = {k: v for k, v in locals().items() if k not in ("self", "module", "private", "__class__")}
        options.update(private_options(private))
        _check_wrappable(module)
        super().__init__()
        if auto_wrap_policy is not None:
            _auto_wrap(module, options)
        self._configure(options)
        materialize(module, param_init_fn)
        self.xla_device = _device()
        self._fsdp_wrapped_module = module
        self._shard_parameters(module)
        self._cast_buffers(module)
        self._is_root: bool | None = None
        self._finalize_queued = False
        self._require_backward_grad_sync = True
        if execute_sharding_on_init:
            xm.mark_step()

    def _configure(self, options: dict[str, Any]) -> None:
        self.reshard_after_forward = self._orig_reshard_after_forward = bool(options["reshard_after_forward"])
        self.disable_reshard_on_root = bool(options["disable_reshard_on_root"])
        self.flatten_parameters = bool(options["flatten_parameters"])
        self.optimization_barrier_in_forward = bool(options["optimization_barrier_in_forward"])
        self.optimization_barrier_in_backward = bool(options["optimization_barrier_in_backward"])
        legacy = options["mark_step_on_finalization"]
        self.sync_on_finalization = bool(options["sync_on_finalization"] if legacy is None else legacy)
        for name in ("compute_dtype", "buffer_dtype"):
            if options[name] is not None and options[name] not in FLOAT_DTYPES:
                raise ValueError(f"{name} must be one of {list(FLOAT_DTYPES)}, not {options[name]}")
        self.compute_dtype: torch.dtype = options["compute_dtype"] or torch.float32
        self.buffer_dtype: torch.dtype = options["buffer_dtype"] or self.compute_dtype
        self.fp32_reduce_scatter = bool(options["fp32_reduce_scatter"])
        self._shard_param_on_dim_0 = bool(options["shard_param_on_dim_0"]) and not self.flatten_parameters
        self._shard_size_multiple = 1 if options["shard_param_on_dim_0"] else int(options["_shard_size_multiple"])
        self._debug_msg, self._debug_print = options["_debug_msg"], bool(options["_debug_print"])
        self._configure_sharding(options)

    def _configure_sharding(self, options: dict[str, Any]) -> None:
        groups, pin = options["sharding_groups"], bool(options["pin_layout_in_collective_ops"])
        if groups is None:
            self.rank, self.world_size = world.global_rank(), world.world_size()
        else:
            if options["sharding_rank"] is None or options["sharding_world_size"] is None:
                raise ValueError(
                    "sharding_rank and sharding_world_size must be provided when sharding_groups is specified"
                )
            self.rank, self.world_size = int(options["sharding_rank"]), int(options["sharding_world_size"])
            mine = [list(g) for g in groups if world.global_rank() in g]
            if len(mine) != 1 or len(mine[0]) != self.world_size or mine[0].index(world.global_rank()) != self.rank:
                raise ValueError(
                    f"rank {world.global_rank()}: sharding_rank {self.rank} of sharding_world_size {self.world_size} "
                    f"does not match its place in sharding_groups {groups}"
                )
        self.sharding_groups = groups
        self._comm = Collectives(self.rank, self.world_size, groups, pin)
        self.all_gather_op = functools.partial(xm.all_gather, pin_layout=pin)
        self.all_reduce_op = functools.partial(xm.all_reduce, pin_layout=pin)
        self.optimization_barrier_op = xm.optimization_barrier_
        self.gradient_predivide_factor = predivide_factor(self.world_size)
        self.gradient_postdivide_factor = self.world_size / self.gradient_predivide_factor
        self._reduce_scatter_scale = 1.0

    # -- sharding --------------------------------------------------------------------------------
    def _shard_parameters(self, module: nn.Module) -> None:
        """Every parameter of ``module`` not already sharded by a nested FSDP module becomes a
        plain leaf attribute of its module(s); the units' shards become this module's parameters."""
        fulls, originals = self._full_params(module)
        if self.flatten_parameters:
            sets = [
                [f for f in fulls if originals[id(f)].requires_grad],
                [f for f in fulls if not originals[id(f)].requires_grad],
            ]
            named = [(f"{WRAPPED}.flat_param_{i}", s) for i, s in enumerate(s for s in sets if s)]
        else:
            named = [(f"{WRAPPED}.{f.name}", [f]) for f in fulls]
        self._units: list[ShardUnit] = []
        for orig_name, params in named:
            tensors = [originals[id(f)] for f in params]
            unit = ShardUnit(
                params,
                tensors,
                orig_name,
                self._comm,
                multiple=self._shard_size_multiple,
                dim0=self._shard_param_on_dim_0,
                flattened=self.flatten_parameters,
                compute_dtype=self.compute_dtype,
                device=self.xla_device,
            )
            self.register_parameter(unit.name, unit.shard)
            self._units.append(unit)
            for index, full in enumerate(params):
                if full.leaf.requires_grad:
                    full.leaf.register_post_accumulate_grad_hook(functools.partial(self._grad_ready, unit, index))
        self.full_params = [f.leaf for f in fulls]
        self.sharded_params = [u.shard for u in self._units]

    def _full_params(self, module: nn.Module) -> tuple[list[FullParam], dict[int, torch.Tensor]]:
        """The parameters to shard, each taken out of its module(s), and their original tensors."""
        found: dict[int, FullParam] = {}
        originals: dict[int, torch.Tensor] = {}
        for path, owner in module.named_modules():
            for name, param in list(owner._parameters.items()):
                if param is None or hasattr(param, "_is_sharded"):
                    continue
                if param.dtype != torch.float32:
                    raise TypeError(f"only fp32 parameters are supported ({_joined(path, name)} is {param.dtype})")
                full = found.get(id(param))
                if full is None:
                    leaf = torch.empty(0, dtype=self.compute_dtype, device=self.xla_device)
                    full = found[id(param)] = FullParam(
                        _joined(path, name), param.shape, leaf.requires_grad_(param.requires_grad)
                    )
                    originals[id(full)] = param
                full.places.append((owner, name))
                del owner._parameters[name]
                object.__setattr__(owner, name, full.leaf)
        return list(found.values()), originals

    @torch.no_grad()
    def _cast_buffers(self, module: nn.Module) -> None:
        """Floating buffers to ``buffer_dtype`` (the original dtype kept for the checkpoint), all
        buffers to the device; a nested FSDP module has done its own."""
        for owner in _own_modules(module):
            for name, buf in list(owner._buffers.items()):
                if buf is None:
                    continue
                new = buf.to(self.xla_device)
                if new.is_floating_point() and new.dtype != self.buffer_dtype:
                    new = new.to(self.buffer_dtype)
                    new._orig_dtype = buf.dtype  # type: ignore[attr-defined]
                owner._buffers[name] = new

    # -- forward and backward --------------------------------------------------------------------
    def _lazy_init(self) -> None:
        if self._is_root is None:
            self._is_root = True
            for m in self.modules():
                if m is not self and isinstance(m, XlaFullyShardedDataParallel) and m._is_root is None:
                    m._is_root = False
            if self._debug_print:
                count = len(list(self.parameters()))
                xm.master_print(f"root FSDP got {count} total params (_debug_msg: {self._debug_msg}).", flush=True)
        if self._is_root and self.disable_reshard_on_root:
            self.reshard_after_forward = False

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self._lazy_init()
        if self.compute_dtype != torch.float32:
            args, kwargs = cast_floats(args, self.compute_dtype), cast_floats(kwargs, self.compute_dtype)
        self._gather()
        # a forward run inside backward is a checkpoint's recomputation: its backward follows at once
        free = self.reshard_after_forward and torch._C._current_graph_task_id() == -1
        with saved_views() if free and torch.is_grad_enabled() else contextlib.nullcontext():
            outputs = self.module(*args, **kwargs)
        if free:
            self._free()
        if torch.is_grad_enabled():
            for t in tensors(outputs):
                if t.requires_grad:
                    t.register_hook(self._before_backward)
        return outputs

    def _gather(self) -> None:
        for unit in self._units:
            unit.gather()

    def _free(self) -> None:
        for unit in self._units:
            unit.free()

    def _before_backward(self, grad: torch.Tensor) -> None:
        """When the gradient of an output arrives: the parameters again, and (root) the end of backward."""
        if self._is_root and not self._finalize_queued:
            self._finalize_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._finalize)
        self._gather()

    def _grad_ready(self, unit: ShardUnit, index: int, leaf: torch.Tensor) -> None:
        """A parameter's gradient is complete: once its unit's all are, reduce-scatter and free them."""
        if not self._require_backward_grad_sync:
            return  # no_sync(): the full gradient accumulates in the parameter
        unit.ready.add(index)
        if unit.ready >= unit.trainable:
            self._reduce_scatter(unit)
            unit.free()

    def _reduce_scatter(self, unit: ShardUnit) -> None:
        pre, post = self.gradient_predivide_factor, self.gradient_postdivide_factor
        unit.reduce_scatter(pre, post, self._reduce_scatter_scale, self.fp32_reduce_scatter)

    @torch.no_grad()
    def _finalize(self) -> None:
        """End of backward (the root's): gradients of units not complete yet are reduce-scattered
        (a parameter that got none counts zeros), the full parameters freed."""
        for m in self.modules():
            if isinstance(m, XlaFullyShardedDataParallel):
                for unit in m._units:
                    if m._require_backward_grad_sync and unit.has_grads():
                        m._reduce_scatter(unit)
                    unit.ready.clear()
                if m._require_backward_grad_sync or m.reshard_after_forward:
                    m._free()
        self._finalize_queued = False
        if self.sync_on_finalization:
            xm.mark_step()

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes within it accumulate full gradients in the parameters (no
        reduce-scatter); the first backward after it reduce-scatters their sum. Root only."""
        self._lazy_init()
        if not self._is_root:
            raise RuntimeError("no_sync on inner FSDP is not supported")
        flags = [(m, m._require_backward_grad_sync) for m in self._fsdp_modules()]
        for m, _ in flags:
            m._require_backward_grad_sync = False
        try:
            yield
        finally:
            for m, flag in flags:
                m._require_backward_grad_sync = flag

    # -- gradients -------------------------------------------------------------------------------
    def set_gradient_divide_factors(self, pre: float, post: float, recursive: bool) -> None:
        """Divide gradients by ``pre`` before and ``post`` after the reduce-scatter's sum; with
        ``(1, 1)`` the reduce-scatter itself scales by 1/N, as torch_xla's does."""
        for m in self._fsdp_modules() if recursive else [self]:
            m.gradient_predivide_factor, m.gradient_postdivide_factor = float(pre), float(post)
            m._reduce_scatter_scale = 1.0 / m.world_size if (pre, post) == (1, 1) else 1.0

    @property
    def params_with_grad(self) -> list[nn.Parameter]:
        return [p for p in self.parameters() if p.grad is not None]

    @torch.no_grad()
    def clip_grad_norm_(
        self, max_norm: float, norm_type: float = 2.0, groups: list[list[int]] | None = None
    ) -> torch.Tensor:
        """Scale every shard's gradient by ``min(1, max_norm / (total + 1e-6))``, ``total`` being the
        norm of all shards of all ranks (all-reduced over ``groups``: every rank by default), which
        it returns. Root only; every rank must call it."""
        if not self._is_root:
            raise RuntimeError("clip_grad_norm_ should only be called on the root (parent) instance")
        norm_type = float(norm_type)
        grads = [p.grad.detach() for p in self.params_with_grad if p.grad is not None]
        if not grads:
            local = torch.zeros((), device=self.xla_device)
        elif norm_type == float("inf"):
            local = torch.stack([g.abs().max() for g in grads]).max()
        else:
            local = torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(g, norm_type) for g in grads]), norm_type
            )
        if norm_type == float("inf"):
            total = self.all_reduce_op(xm.REDUCE_MAX, local, groups=groups)
        else:
            total = self.all_reduce_op(xm.REDUCE_SUM, local**norm_type, groups=groups) ** (1.0 / norm_type)
        coefficient = torch.clamp(max_norm / (total + 1e-6), 0.0, 1.0)
        for g in grads:
            g.mul_(coefficient.to(g.dtype))
        return total

    # -- checkpoints -----------------------------------------------------------------------------
    def get_shard_metadata(self) -> dict[str, Any]:
        """What :func:`~emulator.compat.fsdp_state.consolidate_sharded_state_dicts` needs besides the
        ranks' state dicts: each FSDP module's shards (original name and size), the flattened units'
        parameters, the buffers' original dtypes, this rank and the sharding world size."""
        shard_info: dict[str, dict[str, dict[str, Any]]] = {}
        flatten_info: dict[str, tuple[list[str], list[torch.Size], list[int]]] = {}
        for path, m in self.named_modules():
            if isinstance(m, XlaFullyShardedDataParallel):
                shard_info[path] = {u.name: {"_orig_size": u.orig_size, "_orig_name": u.orig_name} for u in m._units}
                for u in m._units if m.flatten_parameters else ():
                    names, shapes = [p.name for p in u.params], [p.shape for p in u.params]
                    flatten_info[_joined(path, u.orig_name)] = (names, shapes, u.numels)
        buffer_info = {n: {"_orig_dtype": b._orig_dtype} for n, b in self.named_buffers() if hasattr(b, "_orig_dtype")}
        return {
            "shard_info": shard_info,
            "flatten_info": flatten_info,
            "buffer_info": buffer_info,
            "world_size": self.world_size,
            "rank": self.rank,
        }

    def get_original_names_and_sharded_parameters(self) -> list[tuple[str, nn.Parameter]]:
        """``named_parameters()`` under the parameters' original names (a flattened unit's name:
        ``flat_param_<i>`` in its module)."""
        named = []
        for path, m in self.named_modules():
            if isinstance(m, XlaFullyShardedDataParallel):
                for u in m._units:
                    name = _joined(path, u.orig_name)
                    named.append((name.replace(f"{WRAPPED}.", ""), u.shard))
        return named

    # -- the wrapped module ------------------------------------------------------------------------
    @property
    def module(self) -> nn.Module:
        """The wrapped module (its parameters are the gathered full ones only during forward and backward)."""
        return self._modules[WRAPPED]  # type: ignore[return-value]

    def _fsdp_modules(self) -> list[XlaFullyShardedDataParallel]:
        return [m for m in self.modules() if isinstance(m, XlaFullyShardedDataParallel)]

    def __getattr__(self, name: str) -> Any:
        """A name this wrapper lacks is the wrapped module's."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == WRAPPED or WRAPPED not in self.__dict__.get("_modules", {}):
                raise
            return getattr(self._modules[WRAPPED], name)

    def __getitem__(self, key: int) -> nn.Module:
        return self.module[key]  # type: ignore[index]

    def extra_repr(self) -> str:
        return (
            f"world_size={self.world_size}, rank={self.rank}, compute_dtype={self.compute_dtype}, "
            f"buffer_dtype={self.buffer_dtype}, flatten_parameters={self.flatten_parameters}, "
            f"reshard_after_forward={self.reshard_after_forward}, sharding_groups={self.sharding_groups}"
        )


def _joined(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _own_modules(module: nn.Module) -> Iterator[nn.Module]:
    """``module`` and its descendants, not entering a nested FSDP module."""
    yield module
    for child in module.children():
        if not isinstance(child, XlaFullyShardedDataParallel):
            yield from _own_modules(child)


def _check_wrappable(module: nn.Module) -> None:
    if isinstance(module, XlaFullyShardedDataParallel):
        raise RuntimeError(
            "Cannot wrap a module that is already wrapped with FSDP. For nested FSDP, "
            "first wrap the inner child modules before wrapping the outer parent module."
        )
    forward = getattr(type(module), "forward", None)
    if forward is None or forward is nn.Module.forward:
        raise RuntimeError(
            "The module wrapped by FSDP must define a `forward` method and call it during the module's forward "
            "pass (do not wrap nn.ModuleList or nn.ModuleDict)"
        )


def _auto_wrap(module: nn.Module, options: dict[str, Any]) -> None:
    """Wrap ``module``'s children as the policy picks (never ``module`` itself: it is this one)."""
    for path, m in module.named_modules():
        if isinstance(m, XlaFullyShardedDataParallel):
            raise ValueError(f"Expected {path} to NOT be FullyShardedDataParallel if using an `auto_wrap_policy`")
    policy, wrapper = options["auto_wrap_policy"], options["auto_wrapper_callable"]
    kwargs = {k: v for k, v in options.items() if k not in ("auto_wrap_policy", "auto_wrapper_callable")}
    if kwargs["mark_step_on_finalization"] is None:
        del kwargs["mark_step_on_finalization"]
    recursive_wrap(module, policy, wrapper or XlaFullyShardedDataParallel, (), (), only_wrap_children=True, **kwargs)
