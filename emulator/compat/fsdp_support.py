"""Helpers of ``XlaFullyShardedDataParallel`` (docs/run-your-script.md §FSDP): its underscored
options (accepted, or refused as not emulated), the materialization of a module built on the meta
device (``param_init_fn``), and the tensors in a module's inputs and outputs.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from emulator.compat.gaps import NotEmulatedError

QUALIFIED = "torch_xla.distributed.fsdp.XlaFullyShardedDataParallel"
_PRIVATE_DEFAULTS: dict[str, Any] = {
    "mark_step_on_finalization": None,  # torch_xla before 2.6: sync_on_finalization's name
    "_shard_size_multiple": 128,
    "_use_xla_patched_linear": True,
    "_debug_msg": "xla_fsdp",
    "_debug_print": False,
    "_debug_dummy_forward_pass": False,
    "_debug_dummy_all_gather_op": False,
    "_debug_dummy_all_reduce_op": False,
    "_debug_dummy_reduce_scatter_op": False,
    "_debug_dummy_optimization_barrier_op": False,
}
# torch_xla's debugging fakes: a dummy forward pass, collectives that move nothing
_FAKES = (
    "_debug_dummy_forward_pass",
    "_debug_dummy_all_gather_op",
    "_debug_dummy_all_reduce_op",
    "_debug_dummy_reduce_scatter_op",
)


def private_options(given: dict[str, Any]) -> dict[str, Any]:
    """The underscored options with their defaults; a debugging fake asked for is not emulated
    (``_debug_dummy_optimization_barrier_op`` is: a barrier changes no value), an unknown name is
    Python's TypeError."""
    unknown = sorted(set(given) - set(_PRIVATE_DEFAULTS))
    if unknown:
        raise TypeError(f"XlaFullyShardedDataParallel got unexpected keyword arguments {unknown}")
    options = {**_PRIVATE_DEFAULTS, **given}
    for name in _FAKES:
        if options[name]:
            raise NotEmulatedError(f"{QUALIFIED}({name}=True)", "the emulator runs the real forward and collectives")
    return options


def tensors(value: Any) -> Iterator[torch.Tensor]:
    """The tensors in nested tuples, lists, sets and dicts (a Hugging Face ModelOutput is a dict)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors(item)
    elif isinstance(value, list | tuple | set):
        for item in value:
            yield from tensors(item)


def cast_floats(value: Any, dtype: torch.dtype) -> Any:
    """``value`` with its floating tensors cast to ``dtype`` (``compute_dtype``), as torch_xla casts
    a module's inputs: an OrderedDict (a ModelOutput) keeps its class, other dicts, lists and
    tuples become plain ones."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() and value.dtype != dtype else value
    if isinstance(value, OrderedDict):
        out = type(value)()
        for k, v in value.items():
            out[k] = cast_floats(v, dtype)
        return out
    if isinstance(value, dict):
        return {k: cast_floats(v, dtype) for k, v in value.items()}
    if isinstance(value, list):
        return [cast_floats(v, dtype) for v in value]
    if isinstance(value, tuple):
        return tuple(cast_floats(v, dtype) for v in value)
    return value


def materialize(module: nn.Module, param_init_fn: Callable[[nn.Module], None] | None) -> None:
    """A module built on the meta device: ``param_init_fn(module)``, else allocated on the host and
    ``module.reset_parameters()``, as torch_xla does."""
    if not any(p.is_meta for p in module.parameters() if not hasattr(p, "_is_sharded")):
        return
    if param_init_fn is not None:
        param_init_fn(module)
        return
    module.to_empty(device="cpu")
    with torch.no_grad():
        module.reset_parameters()  # type: ignore[operator]
