"""The sharding layout of ``XlaFullyShardedDataParallel`` (docs/run-your-script.md §FSDP): which
parameters are sharded together, how a rank's shard is cut from them, how the full parameters are
all-gathered back and their gradients reduce-scattered into the shard.

A :class:`ShardUnit` is what torch_xla shards as one tensor: a single parameter
(``flatten_parameters=False``, its default), or every trainable (respectively frozen) parameter of
one FSDP module concatenated (``flatten_parameters=True``). Its full layout is the parameters
flattened and concatenated, zero-padded to a multiple of ``world_size * _shard_size_multiple``
(128 by default, as torch_xla pads for efficient gathers); with ``shard_param_on_dim_0=True`` the
one parameter is instead padded along dim 0 to a multiple of ``world_size`` and cut by rows. Rank
``r`` keeps the ``r``-th of ``world_size`` equal slices, in FP32, as an ``nn.Parameter``.

The original parameters become plain leaf tensors of their modules (:class:`FullParam`): between
an all-gather and a free their ``.data`` is a view of the gathered buffer, otherwise an empty
placeholder, so the memory of a freed parameter is really released. Autograd would keep views of
the gathered buffer alive in its saved tensors; :func:`saved_views` swaps those for a reference to
the unit, re-gathered on use in backward, as torch_xla's FSDP frees and re-gathers them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from emulator.compat import xla_model as xm

SEPARATOR = "_FSDP_SHARD_SEPARATOR_"  # torch_xla's: a shard's name is its original name, dots replaced
WRAPPED = "_fsdp_wrapped_module"
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def predivide_factor(world_size: int) -> float:
    """torch_xla's split of the 1/N gradient average: the largest power of two ``f`` dividing N with
    ``f * f <= N`` divides the gradient before the reduce-scatter, ``N / f`` the sum after it."""
    factor = 1
    while world_size % factor == 0 and world_size / factor > factor:
        factor *= 2
    return float(factor)


@dataclass(eq=False)
class FullParam:
    """One parameter of the wrapped module, taken out of its module's ``_parameters``: ``leaf`` is a
    plain tensor attribute at every ``(module, name)`` of ``places`` (a tied weight has several)."""

    name: str  # path in the wrapped module, "lin.weight"
    shape: torch.Size
    leaf: torch.Tensor
    places: list[tuple[nn.Module, str]] = field(default_factory=list)


@dataclass(eq=False)
class Collectives:
    """Where and how a unit's collectives run: the sharding group and this rank in it."""

    rank: int
    world: int
    groups: list[list[int]] | None
    pin_layout: bool


class ShardUnit:
    """Parameters sharded as one tensor: this rank's ``shard``, and the gathered ``full`` buffer
    (None while freed) whose views are the parameters' values."""

    def __init__(
        self,
        params: list[FullParam],
        originals: list[torch.Tensor],
        orig_name: str,
        comm: Collectives,
        *,
        multiple: int,
        dim0: bool,
        flattened: bool,
        compute_dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        self.params = params
        self.comm = comm
        self.dim0 = dim0
        self.multiple = multiple
        self.compute_dtype = compute_dtype
        self.numels = [p.shape.numel() for p in params]
        with torch.no_grad():
            padded = self._layout([t.detach() for t in originals])
            size = padded.size(0) // comm.world
            part = padded.narrow(0, comm.rank * size, size).clone()
        shard = nn.Parameter(part.to(device), requires_grad=any(t.requires_grad for t in originals))
        # a flattened unit's size is its flat length, even for one parameter (it is unflattened by name)
        self.orig_size = torch.Size([sum(self.numels)]) if flattened else params[0].shape
        self.orig_name = orig_name  # "_fsdp_wrapped_module.lin.weight", "_fsdp_wrapped_module.flat_param_0"
        self.name = f"_fsdp_shard.{orig_name}".replace(".", SEPARATOR)
        # torch_xla's marks on a shard (a nested FSDP module's shards are not sharded again)
        shard._is_sharded = True  # type: ignore[attr-defined]
        shard._orig_size = self.orig_size  # type: ignore[attr-defined]
        shard._orig_name = orig_name  # type: ignore[attr-defined]
        shard._name = self.name  # type: ignore[attr-defined]
        self.shard = shard
        self.full: torch.Tensor | None = None
        self._gathered_version = -1
        self.ready: set[int] = set()  # parameters whose gradient this backward has accumulated
        self.trainable = {i for i, p in enumerate(params) if p.leaf.requires_grad}

    # -- layout ----------------------------------------------------------------------------------
    def _layout(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        """The unit's full padded layout of ``tensors`` (its parameters' values or gradients)."""
        if self.dim0:
            t = tensors[0]
            rest = -t.size(0) % self.comm.world
            return F.pad(t, [0, 0] * (t.dim() - 1) + [0, rest]) if rest else t
        flat = torch.cat([t.reshape(-1) for t in tensors]) if len(tensors) > 1 else tensors[0].reshape(-1)
        rest = -flat.numel() % (self.comm.world * self.multiple)
        return F.pad(flat, [0, rest]) if rest else flat

    def _pieces(self, full: torch.Tensor) -> list[torch.Tensor]:
        """The parameters' values as views of the gathered ``full`` layout."""
        if self.dim0:
            return [full[: self.params[0].shape[0]]]
        pieces = full[: sum(self.numels)].split(self.numels)
        return [piece.view(p.shape) for piece, p in zip(pieces, self.params, strict=True)]

    # -- gather and free -------------------------------------------------------------------------
    @property
    def gathered(self) -> bool:
        """Gathered and current: a shard changed since (an optimizer step, a load) is gathered again."""
        return self.full is not None and self._gathered_version == self.shard._version

    @torch.no_grad()
    def gather(self) -> None:
        """All-gather the shards (cast to the compute dtype) over the sharding group into the
        parameters' values; nothing if already gathered."""
        if self.gathered:
            return
        self.free()
        part = self.shard.detach()
        if part.dtype != self.compute_dtype:
            part = part.to(self.compute_dtype)
        full = xm.all_gather(part, 0, self.comm.groups, pin_layout=self.comm.pin_layout)
        for p, piece in zip(self.params, self._pieces(full), strict=True):
            p.leaf.data = piece
        self.full = full
        self._gathered_version = self.shard._version
        _GATHERED[_storage(full)] = self

    def free(self) -> None:
        """Point the parameters at an empty placeholder: the gathered buffer is released."""
        if self.full is None:
            return
        _GATHERED.pop(_storage(self.full), None)
        self.full = None
        for p in self.params:
            p.leaf.data = torch.empty(0, dtype=p.leaf.dtype, device=p.leaf.device)

    # -- gradients -------------------------------------------------------------------------------
    def has_grads(self) -> bool:
        return any(p.leaf.grad is not None for p in self.params)

    @torch.no_grad()
    def reduce_scatter(self, predivide: float, postdivide: float, scale: float, fp32: bool) -> None:
        """Reduce-scatter the parameters' full gradients (zeros for one that has none) into the
        shard's ``.grad`` (FP32, added to what it holds): divided by ``predivide`` before the sum
        over the sharding group, multiplied by ``scale`` and divided by ``postdivide`` after it."""
        grads = []
        for p in self.params:
            g = p.leaf.grad
            grads.append(torch.zeros(p.shape, dtype=p.leaf.dtype, device=p.leaf.device) if g is None else g)
            p.leaf.grad = None
        full = self._layout(grads)
        if predivide > 1:
            full = full / predivide
        if fp32 and full.dtype != torch.float32:
            full = full.to(torch.float32)
        comm = self.comm
        part = xm.reduce_scatter(xm.REDUCE_SUM, full, scale, 0, comm.world, comm.groups, pin_layout=comm.pin_layout)
        part = part.to(torch.float32)
        if postdivide > 1:
            part = part / postdivide
        if self.shard.grad is None:
            self.shard.grad = part
        else:
            self.shard.grad.add_(part)
        self.ready.clear()


# -- autograd's saved tensors ---------------------------------------------------------------------
_GATHERED: dict[int, ShardUnit] = {}  # the storage of each gathered buffer -> its unit


def _storage(t: torch.Tensor) -> int:
    return int(t.untyped_storage().data_ptr())


@dataclass(frozen=True)
class _SavedView:
    """A tensor autograd saved that is a view of a unit's gathered buffer: rebuilt on use."""

    unit: ShardUnit
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int

    def rebuild(self) -> torch.Tensor:
        self.unit.gather()  # the pre-backward hook has usually done it: then this is nothing
        assert self.unit.full is not None
        return self.unit.full.as_strided(self.size, self.stride, self.offset)


def _pack(t: torch.Tensor) -> Any:
    try:
        unit = _GATHERED.get(_storage(t))
    except (RuntimeError, NotImplementedError):  # a tensor without storage (sparse, nested)
        return t
    if unit is None or any(t is p.leaf for p in unit.params):
        return t  # a parameter itself is saved as itself: its .data is swapped, nothing is kept
    return _SavedView(unit, tuple(t.size()), tuple(t.stride()), int(t.storage_offset()))


def _unpack(saved: Any) -> torch.Tensor:
    return saved.rebuild() if isinstance(saved, _SavedView) else saved


@contextlib.contextmanager
def saved_views() -> Iterator[None]:
    """Within it, autograd keeps no view of a gathered buffer for backward (see the module doc)."""
    with torch.autograd.graph.saved_tensors_hooks(_pack, _unpack):
        yield
