"""``neuronx_distributed.utils.adamw_fp32_optim_params.AdamW_FP32OptimParams``: AdamW whose
moments (and the update itself) are kept in fp32 whatever the parameters' dtype, so a bf16 model
trains with fp32 optimizer state. The update is the original AdamW of Loshchilov & Hutter as the
Hugging Face implementation does it: bias correction folded into the step size, ``eps`` added to
the square root of the second moment, decoupled weight decay applied after the update.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch


class AdamW_FP32OptimParams(torch.optim.Optimizer):
    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        correct_bias: bool = True,
        **ignored: Any,
    ) -> None:
        if lr < 0 or eps < 0 or weight_decay < 0:
            raise ValueError(f"invalid lr {lr}, eps {eps} or weight_decay {weight_decay}: must be >= 0")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"invalid betas {betas}: each must be in [0, 1)")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "correct_bias": correct_bias}
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.float()
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
                state["step"] += 1
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                exp_avg.mul_(beta1).add_(grad, alpha=1.0 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
                step_size = group["lr"]
                if group["correct_bias"]:
                    t = state["step"]
                    step_size *= math.sqrt(1.0 - beta2**t) / (1.0 - beta1**t)
                master = p.float()
                master.addcdiv_(exp_avg, exp_avg_sq.sqrt().add_(group["eps"]), value=-step_size)
                if group["weight_decay"] > 0:
                    master.add_(master, alpha=-group["lr"] * group["weight_decay"])
                p.copy_(master)
        return loss
