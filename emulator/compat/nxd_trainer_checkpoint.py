"""``neuronx_distributed``'s trainer checkpoints: ``save_checkpoint``, ``load_checkpoint``,
``has_checkpoint``, ``finalize_checkpoint`` (docs/run-your-script.md §NxD trainer).

The layout is neuronx-distributed's, one directory per tag::

    <dir>/<tag>/checkpoint                               marks a checkpoint directory
    <dir>/<tag>/model/dp_rank_00_tp_rank_TT_pp_rank_PP.pt the first data-parallel rank of each group
    <dir>/<tag>/optim/dp_rank_DD_tp_rank_TT_pp_rank_PP.pt every rank with ZeRO-1 (its shard), else DP rank 0
    <dir>/<tag>/scheduler.pt, user_content.pt            global rank 0
    <dir>/<tag>/done                                     written once every rank has saved

``use_xser=True`` writes the way torch-xla's serialization does (``emulator/compat/xser.py``): the
``.pt`` file holds the structure with each tensor replaced by a reference and the tensors are
files of ``<file>.tensors/``. The
newest tag is the one whose ``done`` is newest; ``num_kept_ckpts`` removes the older complete
ones. ``async_save`` saves before returning (the files are the same; only when is different).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from emulator.compat import nxd_state
from emulator.compat import xla_model as xm
from emulator.compat import xser as xser_format
from emulator.compat.nxd_trainer import NxDOptimizer
from emulator.compat.nxd_zero1 import NeuronZero1Optimizer


def _file(kind: str, dp: bool) -> str:
    dp_rank = nxd_state.get_data_parallel_rank() if dp else 0
    tp, pp = nxd_state.get_tensor_model_parallel_rank(), nxd_state.get_pipeline_model_parallel_rank()
    return f"{kind}/dp_rank_{dp_rank:02d}_tp_rank_{tp:02d}_pp_rank_{pp:02d}.pt"


def _write(obj: Any, path: Path, xser: bool) -> None:
    if xser:
        xser_format.write(obj, path)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(xm._to_cpu(obj), path)


def _read(path: Path) -> Any:
    if path.with_name(path.name + ".tensors").is_dir():
        return xser_format.load(path)
    return torch.load(path, map_location="cpu", weights_only=False)


def _completed_tags(root: Path) -> list[str]:
    done = [d for d in root.iterdir() if (d / "done").is_file()] if root.is_dir() else []
    return [d.name for d in sorted(done, key=lambda d: (d / "done").stat().st_mtime_ns)]


def has_checkpoint(checkpoint_dir_str: str) -> bool:
    return bool(_completed_tags(Path(checkpoint_dir_str)))


def _is_zero1(optimizer: Any) -> bool:
    if isinstance(optimizer, NxDOptimizer):
        return bool(optimizer.nxd_config["optimizer_config"]["zero_one_enabled"])
    return isinstance(optimizer, NeuronZero1Optimizer)


def _first_of_dp_group() -> bool:
    return nxd_state.get_data_parallel_rank() == 0


def save_checkpoint(
    checkpoint_dir_str: str,
    tag: str,
    model: Any = None,
    optimizer: Any = None,
    scheduler: Any = None,
    user_content: Any = None,
    num_workers: int = 8,
    use_xser: bool = False,
    num_kept_ckpts: int | None = None,
    async_save: bool = False,
    zero1_optimizer: bool = False,
    **unused: Any,
) -> None:
    if not dist.is_initialized():
        raise RuntimeError("save_checkpoint: only distributed training is supported (init_process_group first)")
    root, rank = Path(checkpoint_dir_str), dist.get_rank()
    here = root / str(tag)
    if rank == 0:
        here.mkdir(parents=True, exist_ok=True)
        (here / "checkpoint").write_text("1")
    xm.rendezvous("checkpoint directory created")
    if optimizer is not None:
        zero1 = zero1_optimizer if isinstance(optimizer, dict) else _is_zero1(optimizer)
        state = optimizer if isinstance(optimizer, dict) else optimizer.state_dict()
        if zero1 or _first_of_dp_group():
            _write(state, here / _file("optim", dp=zero1), use_xser)
    if model is not None and _first_of_dp_group():
        _write(model if isinstance(model, dict) else model.state_dict(), here / _file("model", dp=False), use_xser)
    if rank == 0 and scheduler is not None:
        torch.save(scheduler.state_dict(), here / "scheduler.pt")
    if rank == 0 and user_content is not None:
        torch.save(xm._to_cpu(user_content), here / "user_content.pt")
    xm.rendezvous("saving checkpoint done")
    if rank == 0:
        (here / "done").write_text("1")
        _remove_old(root, num_kept_ckpts)
    xm.rendezvous("mark checkpoint as done")


def _remove_old(root: Path, num_kept: int | None) -> None:
    if num_kept is None or num_kept == -1:
        return
    tags = _completed_tags(root)
    for tag in tags[: max(0, len(tags) - num_kept)]:
        (root / tag / "done").unlink()
        shutil.rmtree(root / tag, ignore_errors=True)


def load_checkpoint(
    path: str,
    tag: str | None = None,
    model: Any = None,
    optimizer: Any = None,
    scheduler: Any = None,
    num_workers: int = 8,
    strict: bool = True,
    **unused: Any,
) -> Any:
    if not dist.is_initialized():
        raise RuntimeError("load_checkpoint: only distributed training is supported (init_process_group first)")
    root = Path(path)
    if tag is None:
        tags = _completed_tags(root)
        if not tags:
            raise RuntimeError(f"Error: no checkpoint under directory {path}")
        tag = tags[-1]
    here = root / str(tag)
    if optimizer is not None:
        optimizer.load_state_dict(_read(here / _file("optim", dp=_is_zero1(optimizer))))
    if model is not None:
        model.load_state_dict(_read(here / _file("model", dp=False)), strict=strict)
    if scheduler is not None:
        scheduler.load_state_dict(torch.load(here / "scheduler.pt", map_location="cpu", weights_only=False))
    content = here / "user_content.pt"
    user = torch.load(content, map_location="cpu", weights_only=False) if content.is_file() else None
    xm.rendezvous("load all checkpoints done")
    return user


def finalize_checkpoint() -> None:
    """Every save has completed when ``save_checkpoint`` returns: nothing is pending."""
