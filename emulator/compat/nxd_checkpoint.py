"""``neuronx_distributed.parallel_layers.checkpointing``: ``save`` and ``load`` of sharded
checkpoints, one file per tensor-parallel and pipeline rank, as neuronx-distributed lays them
out: ``<dir>/tp_rank_XX_pp_rank_YY/checkpoint.pt`` (``_dp_rank_ZZ`` added when every
data-parallel rank saves). Tensors are saved as host copies; ranks meet at a rendezvous after
saving. The xser format (``save_xser``/``load_xser``) and unsharded loads are not emulated.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from emulator.compat import nxd_state, xla_model
from emulator.compat.gaps import NotEmulatedError


def _path(root: str | os.PathLike[str], master_dp_only: bool) -> Path:
    tp, pp = nxd_state.get_tensor_model_parallel_rank(), nxd_state.get_pipeline_model_parallel_rank()
    name = f"tp_rank_{tp:02d}_pp_rank_{pp:02d}"
    if not master_dp_only:
        name += f"_dp_rank_{nxd_state.get_data_parallel_rank():02d}"
    return Path(root) / name / "checkpoint.pt"


def save(
    checkpoint: dict,
    output_dir: str | os.PathLike[str],
    save_serially: bool = True,
    save_xser: bool = False,
    down_cast_bf16: bool = False,
    master_dp_only: bool = True,
) -> None:
    if save_xser:
        raise NotEmulatedError("neuronx_distributed checkpointing.save(save_xser=True)")
    path = _path(output_dir, master_dp_only)
    if not master_dp_only or nxd_state.get_data_parallel_rank() == 0:
        host = xla_model._to_cpu(checkpoint)
        if down_cast_bf16:
            from torch.utils._pytree import tree_map

            host = tree_map(
                lambda x: x.to(torch.bfloat16) if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x, host
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(host, path)
    xla_model.rendezvous("Checkpoint Done")


def load(
    chkpt_path: str | os.PathLike[str],
    model: Any = None,
    model_or_optimizer: Any = None,
    model_key: str = "model",
    load_xser: bool = False,
    sharded: bool = True,
    strict: bool = True,
    master_dp_only: bool = True,
    weights_only: bool = False,
) -> dict:
    if load_xser:
        raise NotEmulatedError("neuronx_distributed checkpointing.load(load_xser=True)")
    if not sharded:
        raise NotEmulatedError("neuronx_distributed checkpointing.load(sharded=False)")
    checkpoint = torch.load(_path(chkpt_path, master_dp_only), map_location="cpu", weights_only=weights_only)
    target = model_or_optimizer if model_or_optimizer is not None else model
    if target is not None:
        state = checkpoint.pop(model_key)
        if isinstance(target, torch.nn.Module):
            target.load_state_dict(state, strict=strict)
        else:
            target.load_state_dict(state)
    return checkpoint
