"""``torch_xla.distributed.zero_redundancy_optimizer.ZeroRedundancyOptimizer``: ZeRO stage 1 over
the data-parallel ranks, with real values and real collectives between the processes
(docs/run-your-script.md §ZeRO-1).

Each rank keeps a 1/N shard of every parameter (dim 0 padded to a multiple of N, the shard in the
optimizer's dtype, FP32 by default) and the wrapped optimizer steps only those shards, so its
state (AdamW's two moments) is 1/N per core. ``step()``: every gradient is reduce-scattered over
the sharding group and averaged (scale 1/N), the shards' global gradient norm is all-reduced and
clipped to ``max_norm`` (default 1.0), the optimizer steps the shards, and the updated shards are
all-gathered back into the full parameters in their own dtype. The collectives are the ones
``xm.reduce_scatter`` / ``xm.all_reduce`` / ``xm.all_gather`` run (costed on the job's links).

``use_grad_acc_hook=True`` accumulates every backward's gradient into a ``main_grad`` buffer in
the optimizer dtype (a post-accumulate-grad hook adds ``.grad`` to it and clears ``.grad``), so
micro-batches accumulate in FP32 under BF16 weights — NxD's ``use_fp32_grad_acc``;
``higher_cc_precision=True`` reduce-scatters in the optimizer dtype too (else in the parameter's).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from emulator.compat import world
from emulator.compat import xla_model as xm


class ZeroRedundancyOptimizer(torch.optim.Optimizer):
    def __init__(
        self,
        params: Iterable[Any],
        optimizer_class: type[torch.optim.Optimizer],
        optimizer_dtype: torch.dtype | None = None,
        grad_clipping: bool = True,
        max_norm: float | None = None,
        pin_layout: bool = True,
        sharding_groups: list[list[int]] | None = None,
        grad_norm_groups: list[list[int]] | None = None,
        lazy_init: bool = False,
        use_grad_acc_hook: bool = False,
        save_master_weights: bool = False,
        **defaults: Any,
    ) -> None:
        higher_cc_precision = bool(defaults.pop("higher_cc_precision", False))
        defaults = {k: v for k, v in defaults.items() if not k.startswith(("bucket_cap_mb", "coalesce"))}
        super().__init__(params, defaults)
        self.optimizer_class = optimizer_class
        self.optimizer_dtype = optimizer_dtype or torch.float32
        self.grad_clipping = grad_clipping
        self.max_norm = 1.0 if max_norm is None else float(max_norm)
        self.save_master_weights = save_master_weights
        self.use_grad_acc_hook = use_grad_acc_hook
        self.higher_cc_precision = higher_cc_precision
        self._hooks: list[Any] = []
        self._sharding_groups = sharding_groups or [list(range(world.world_size()))]
        self._grad_norm_groups = grad_norm_groups
        self._grad_norm: torch.Tensor | None = None
        self.base_optimizer: torch.optim.Optimizer | None = None
        self.inited = False
        if not lazy_init:
            self.init_zero()

    # -- sharding -------------------------------------------------------------------------------
    @property
    def sharding_groups(self) -> list[list[int]]:
        return self._sharding_groups

    @property
    def grad_norm(self) -> torch.Tensor | None:
        return self._grad_norm

    def init_zero(self) -> None:
        """Shard the parameters and build the wrapped optimizer over the shards."""
        me = world.global_rank()
        mine = [list(g) for g in self._sharding_groups if me in g]
        if len(mine) != 1:
            raise ValueError(f"rank {me} must be in exactly one of the sharding groups {self._sharding_groups}")
        self.local_world_size, self.local_rank = len(mine[0]), mine[0].index(me)
        groups = []
        for group in self.param_groups:
            shards = [nn.Parameter(self._shard(p.detach()), requires_grad=p.requires_grad) for p in group["params"]]
            groups.append({**copy.copy(group), "params": shards})
        self.base_optimizer = self.optimizer_class(groups, **self.defaults)
        self._sync_param_groups()
        if self.use_grad_acc_hook:
            self._hook_grad_accumulation()
        self.inited = True

    def _hook_grad_accumulation(self) -> None:
        """After each backward, add the parameter's gradient to its ``main_grad`` (optimizer dtype)."""

        def accumulate(param: torch.Tensor) -> None:
            if param.grad is None:
                return
            main = getattr(param, "main_grad", None)
            if main is None:
                setattr(param, "main_grad", param.grad.detach().to(self.optimizer_dtype))  # noqa: B010
            else:
                main.add_(param.grad.detach().to(self.optimizer_dtype))
            param.grad = None

        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    self._hooks.append(p.register_post_accumulate_grad_hook(accumulate))

    def zero_grad(self, set_to_none: bool = True) -> None:
        super().zero_grad(set_to_none=set_to_none)
        for group in self.param_groups:
            for p in group["params"]:
                if getattr(p, "main_grad", None) is not None:
                    p.main_grad = None if set_to_none else p.main_grad.zero_()

    @staticmethod
    def _gradient(param: torch.Tensor) -> torch.Tensor | None:
        return param.grad if param.grad is not None else getattr(param, "main_grad", None)

    def _padded(self, t: torch.Tensor) -> torch.Tensor:
        rest = t.size(0) % self.local_world_size
        if not rest:
            return t
        return F.pad(t, [0, 0] * (t.dim() - 1) + [0, self.local_world_size - rest])

    def _shard(self, t: torch.Tensor) -> torch.Tensor:
        chunk = self._padded(t).chunk(self.local_world_size)[self.local_rank]
        return chunk.to(self.optimizer_dtype).clone()

    def _sync_param_groups(self) -> None:
        """Learning rate and the other settings (a scheduler changes ours) onto the wrapped optimizer."""
        assert self.base_optimizer is not None
        for ours, theirs in zip(self.param_groups, self.base_optimizer.param_groups, strict=True):
            theirs.update({k: v for k, v in ours.items() if k != "params"})

    def _pairs(self) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
        assert self.base_optimizer is not None
        for ours, theirs in zip(self.param_groups, self.base_optimizer.param_groups, strict=True):
            yield from zip(ours["params"], theirs["params"], strict=True)

    # -- the step ---------------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        if not self.inited:
            raise RuntimeError("ZeroRedundancyOptimizer: call init_zero() first (it was made with lazy_init=True)")
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._sync_param_groups()
        n = self.local_world_size
        for param, shard in self._pairs():
            full = self._gradient(param)
            if full is None:
                shard.grad = None
                continue
            full = full.to(self.optimizer_dtype if self.higher_cc_precision else param.dtype)
            grad = xm.reduce_scatter(xm.REDUCE_SUM, self._padded(full), 1.0 / n, 0, n, self._sharding_groups)
            shard.grad = grad.to(self.optimizer_dtype)
        if self.grad_clipping:
            self._clip()
        assert self.base_optimizer is not None
        self.base_optimizer.step()  # kwargs: torch_xla's sharding_scheme and the like, one level here
        for param, shard in self._pairs():
            full = xm.all_gather(shard.detach().to(param.dtype), 0, self._sharding_groups)
            param.copy_(full[: param.size(0)])
            shard.grad = None  # the reduce-scattered gradient has been used: free its device memory
        return loss

    def _norm_share(self, param: torch.Tensor) -> float:
        """What one rank's squared shard of ``param`` counts in the global norm (1: all of it)."""
        return 1.0

    def _clip(self) -> None:
        pairs = [(p, s.grad) for p, s in self._pairs() if s.grad is not None]
        shards = [g for _, g in pairs]
        device = shards[0].device if shards else None
        total = torch.zeros((), dtype=self.optimizer_dtype, device=device)
        for p, g in pairs:
            total += (g * g).sum() * self._norm_share(p)
        xm.all_reduce(xm.REDUCE_SUM, [total], groups=self._sharding_groups)
        if self._grad_norm_groups is not None:
            xm.all_reduce(xm.REDUCE_SUM, [total], groups=self._grad_norm_groups)
        self._grad_norm = total.sqrt()
        coeff = torch.clamp(self.max_norm / (self._grad_norm + 1e-6), max=1.0)
        for g in shards:
            g.mul_(coeff)

    # -- checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        assert self.base_optimizer is not None
        state = {"base_state": self.base_optimizer.state_dict(), "param_groups": self.param_groups}
        state["shape_info"] = [p.shape for group in self.param_groups for p in group["params"]]
        if self.save_master_weights:
            state["sharded_master_weights"] = [s.detach().clone() for _, s in self._pairs()]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        assert self.base_optimizer is not None
        self.base_optimizer.load_state_dict(state_dict["base_state"])
        for ours, saved in zip(self.param_groups, state_dict["param_groups"], strict=True):
            ours.update({k: v for k, v in saved.items() if k != "params"})
        for (param, shard), master in zip(self._pairs(), state_dict.get("sharded_master_weights") or [], strict=False):
            shard.data.copy_(master)
            with torch.no_grad():
                full = xm.all_gather(shard.detach().to(param.dtype), 0, self._sharding_groups)
                param.copy_(full[: param.size(0)])
