"""``neuronx_distributed.optimizer.NeuronZero1Optimizer``: torch_xla's ZeRO-1
(:mod:`emulator.compat.zero1`) over NxD's data-parallel groups (docs/run-your-script.md §NxD trainer).

What NxD adds: the model-parallel grid must exist; the sharding groups default to the
data-parallel replica groups; the global gradient norm counts a tensor-parallel shard once on
every TP rank and a parameter replicated over TP once over the group (NxD's ``get_grad_norm``
with ``zero1_optimizer=True``), summed over the ``grad_norm_groups`` (the TP groups); and the
deprecated ``save_sharded_state_dict``/``load_sharded_state_dict`` (one file per DP and TP rank).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from emulator.compat import nxd_state
from emulator.compat import xla_model as xm
from emulator.compat.nxd_layers import norm_share
from emulator.compat.zero1 import ZeroRedundancyOptimizer


class NeuronZero1Optimizer(ZeroRedundancyOptimizer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if not nxd_state.model_parallel_is_initialized():
            raise RuntimeError("initialize_model_parallel need to be called before creating NeuronZero1Optimizer")
        if kwargs.get("sharding_groups") is None:
            kwargs["sharding_groups"] = nxd_state.get_data_parallel_replica_groups()
        super().__init__(*args, **kwargs)

    def _norm_share(self, param: torch.Tensor) -> float:
        # summed over the TP group too (grad_norm_groups): a TP-replicated parameter counts once
        return 1.0 if self._grad_norm_groups is None else norm_share(param)

    def _path(self, output_dir: str) -> str:
        dp, tp = nxd_state.get_data_parallel_rank(), nxd_state.get_tensor_model_parallel_rank()
        return os.path.join(output_dir, f"optim.dp_rank_{dp:02d}.tp_rank_{tp:02d}")

    def save_sharded_state_dict(self, output_dir: str, num_workers_per_step: int = 8) -> None:
        state = xm._to_cpu(self.state_dict())
        state["dp_rank"] = nxd_state.get_data_parallel_rank()
        state["tp_rank"] = nxd_state.get_tensor_model_parallel_rank()
        os.makedirs(output_dir, exist_ok=True)
        torch.save(state, self._path(output_dir))
        xm.rendezvous("optimizer checkpoint done")

    def load_sharded_state_dict(self, output_dir: str, num_workers_per_step: int = 8) -> None:
        state = torch.load(self._path(output_dir), map_location="cpu", weights_only=False)
        state.pop("dp_rank", None)
        state.pop("tp_rank", None)
        self.load_state_dict(state)
        xm.rendezvous("optimizer load done")
