"""``torch_xla.distributed.fsdp.state_dict_utils`` and ``checkpoint_module``
(docs/run-your-script.md §FSDP).

Each rank of an FSDP job saves its own ``model.state_dict()`` — its shards, under names that start
with ``_fsdp_shard`` — with ``model.get_shard_metadata()``. :func:`consolidate_sharded_state_dicts`
rebuilds the unwrapped module's full state dict from every rank's: shards concatenated in rank
order, the padding cut off, flattened units split back into their parameters, buffers cast back
to their original dtype, the wrappers' names (``_fsdp_wrapped_module.``) removed.
"""

from __future__ import annotations

import glob
import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from emulator.compat.checkpoint import checkpoint
from emulator.compat.fsdp_shard import WRAPPED

_WRAPPER_NAMES = (f"{WRAPPED}.", "_fpw_module.")  # the second: torch_xla's flatten wrapper, in its files


def _shard_key(name: str) -> tuple[str, str] | None:
    """``(FSDP module path, shard name)`` of a sharded entry's key; None for a buffer."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_fsdp_shard"):
            return ".".join(parts[:i]), ".".join(parts[i:])
    return None


def _joined(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _full_tensor(shards: list[torch.Tensor], orig_size: Sequence[int]) -> torch.Tensor:
    """The shards of every rank joined, the padding cut: a flat layout (1-D shards) or rows (dim 0)."""
    whole = torch.cat(shards, 0)
    size = tuple(int(d) for d in orig_size)
    if whole.dim() == 1:
        return whole[: math.prod(size)].view(size)
    return whole[: size[0]]


def _unflatten(state: OrderedDict[str, torch.Tensor], flatten_info: dict[str, Any]) -> OrderedDict[str, torch.Tensor]:
    out: OrderedDict[str, torch.Tensor] = OrderedDict()
    for name, value in state.items():
        info = flatten_info.get(name) if f"{WRAPPED}.flat_param_" in name else None
        if info is None:
            out[name] = value
            continue
        names, shapes, numels = info
        prefix = name.rsplit(".", 1)[0]
        for part, shape, key in zip(value.split(list(numels)), shapes, names, strict=True):
            out[_joined(prefix, key)] = part.view(tuple(shape))
    return out


def consolidate_sharded_state_dicts(
    state_dict_list: list[dict[str, torch.Tensor]], shard_metadata: dict[str, Any]
) -> OrderedDict[str, torch.Tensor]:
    """The full state dict of the unwrapped module from every rank's ``model.state_dict()``
    (``state_dict_list``, in rank order) and any rank's ``model.get_shard_metadata()``. Buffers are
    rank 0's."""
    if len(state_dict_list) != shard_metadata["world_size"]:
        raise ValueError(
            f"{len(state_dict_list)} state dicts for an FSDP model sharded over {shard_metadata['world_size']} ranks"
        )
    buffer_info = shard_metadata.get("buffer_info", {})
    state: OrderedDict[str, torch.Tensor] = OrderedDict()
    for name, value in state_dict_list[0].items():
        key = _shard_key(name)
        if key is None:
            dtype = buffer_info.get(name, {}).get("_orig_dtype")
            state[name] = value if dtype is None else value.to(dtype)
            continue
        info = shard_metadata["shard_info"][key[0]][key[1]]
        full = _full_tensor([sd[name] for sd in state_dict_list], info["_orig_size"])
        state[_joined(key[0], info["_orig_name"])] = full
    state = _unflatten(state, shard_metadata.get("flatten_info", {}))
    return OrderedDict((_strip(name), value) for name, value in state.items())


def _strip(name: str) -> str:
    for wrapper in _WRAPPER_NAMES:
        name = name.replace(wrapper, "")
    return name


def consolidate_sharded_model_checkpoints(
    ckpt_prefix: str, ckpt_suffix: str = "*.pth", save_path: str = "", save_model: bool = True
) -> tuple[OrderedDict[str, torch.Tensor], str | None]:
    """Load every file matching ``ckpt_prefix + ckpt_suffix`` (each a dict with the rank's
    ``"model"`` state dict and its ``"shard_metadata"``), consolidate them, and with ``save_model``
    save ``{"model": full_state_dict}`` to ``save_path`` (default ``ckpt_prefix +
    "_consolidated.pth"``). Returns the full state dict and the path saved to (None if not saved)."""
    pattern = ckpt_prefix + ckpt_suffix
    paths = glob.glob(pattern)
    if not paths:
        raise FileNotFoundError(f"Cannot find any files matching {pattern}.")
    print(f"found {len(paths)} checkpoint files in {pattern}")
    loaded = sorted(
        ((torch.load(path, map_location="cpu"), path) for path in paths),
        key=lambda c: c[0]["shard_metadata"]["rank"],
    )
    for rank, (ckpt, path) in enumerate(loaded):
        meta = ckpt["shard_metadata"]
        if meta["world_size"] != len(loaded) or meta["rank"] != rank:
            raise ValueError(
                f"{path} is rank {meta['rank']} of {meta['world_size']}, but {len(loaded)} files match {pattern}: "
                "check for missing or unexpected files"
            )
    full = consolidate_sharded_state_dicts([ckpt["model"] for ckpt, _ in loaded], loaded[0][0]["shard_metadata"])
    if not save_model:
        return full, None
    target = save_path or ckpt_prefix + "_consolidated.pth"
    torch.save({"model": full}, target)
    print(f"saved consolidated model to {target}")
    return full, target


def checkpoint_module(module: nn.Module) -> nn.Module:
    """``module`` with its ``forward`` run under activation checkpointing
    (``torch_xla.utils.checkpoint.checkpoint``, reentrant): its activations are recomputed in
    backward. Keyword arguments are passed through; a call with no input that requires grad runs
    plainly (reentrant checkpointing could not give its parameters gradients). Returns ``module``."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"checkpoint_module expects an nn.Module, got {type(module).__name__}")
    original = module.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        keys = list(kwargs)
        values = [*args, *kwargs.values()]
        if not any(isinstance(v, torch.Tensor) and v.requires_grad for v in values):
            return original(*args, **kwargs)

        def run(*flat: Any) -> Any:
            return original(*flat[: len(args)], **dict(zip(keys, flat[len(args) :], strict=True)))

        return checkpoint(run, *values)

    module._xla_checkpointed_forward_original = original  # type: ignore[assignment]
    module.forward = forward
    return module
