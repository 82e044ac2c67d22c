"""``torch_xla.distributed.fsdp.wrap``: which submodules ``XlaFullyShardedDataParallel`` wraps as
FSDP modules of their own (``auto_wrap_policy``; docs/run-your-script.md §FSDP).

A policy is called as ``policy(module=m, recurse=..., unwrapped_params=n)``: with ``recurse=True``
it says whether to look into ``m``'s children, with ``recurse=False`` whether to wrap ``m`` itself,
``n`` being the number of its parameters not yet wrapped. :func:`recursive_wrap` walks the module
tree depth first with it, as torch_xla's (and PyTorch 1.13's) does.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, ClassVar

from torch import nn


def always_wrap_policy(*args: Any, **kwargs: Any) -> bool:
    """Every submodule becomes an FSDP module."""
    return True


def lambda_auto_wrap_policy(
    module: nn.Module, recurse: bool, unwrapped_params: int, lambda_fn: Callable[[nn.Module], bool]
) -> bool:
    """Look everywhere; wrap the modules for which ``lambda_fn(module)`` is true."""
    return True if recurse else bool(lambda_fn(module))


def transformer_auto_wrap_policy(
    module: nn.Module, recurse: bool, unwrapped_params: int, transformer_layer_cls: Collection[type[nn.Module]]
) -> bool:
    """Look everywhere; wrap each instance of ``transformer_layer_cls`` (a transformer's blocks);
    the rest stays with the outer FSDP module."""
    return True if recurse else isinstance(module, tuple(transformer_layer_cls))


class _SizeBasedPolicy:
    """``size_based_auto_wrap_policy``: a module with at least ``min_num_params`` unwrapped
    parameters (1e8 by default) is looked into (unless its type is in ``force_leaf_modules``) and
    wrapped (unless its type is in ``exclude_wrap_modules``). The defaults are the attributes
    ``FORCE_LEAF_MODULES`` and ``EXCLUDE_WRAP_MODULES``, as in torch_xla."""

    EXCLUDE_WRAP_MODULES: ClassVar[set[type[nn.Module]]] = {nn.ModuleList, nn.ModuleDict}
    FORCE_LEAF_MODULES: ClassVar[set[type[nn.Module]]] = {nn.MultiheadAttention}

    def __call__(
        self,
        module: nn.Module,
        recurse: bool,
        unwrapped_params: int,
        min_num_params: int = int(1e8),
        force_leaf_modules: Collection[type[nn.Module]] | None = None,
        exclude_wrap_modules: Collection[type[nn.Module]] | None = None,
    ) -> bool:
        leaves = self.FORCE_LEAF_MODULES if force_leaf_modules is None else force_leaf_modules
        excluded = self.EXCLUDE_WRAP_MODULES if exclude_wrap_modules is None else exclude_wrap_modules
        if unwrapped_params < min_num_params:
            return False
        return not isinstance(module, tuple(leaves if recurse else excluded))


size_based_auto_wrap_policy = _SizeBasedPolicy()


def _wrap(module: nn.Module, wrapper_cls: Callable[..., nn.Module], **kwargs: Any) -> nn.Module:
    """``wrapper_cls(module, **kwargs)``; a module's ``_wrap_overrides`` dict overrides ``kwargs``."""
    overrides = getattr(module, "_wrap_overrides", None)
    return wrapper_cls(module, **{**kwargs, **(overrides or {})})


def recursive_wrap(
    module: nn.Module,
    auto_wrap_policy: Callable[..., bool],
    wrapper_cls: Callable[..., nn.Module],
    ignored_modules: Collection[nn.Module],
    ignored_params: Collection[nn.Parameter],
    only_wrap_children: bool = False,
    **kwargs: Any,
) -> tuple[nn.Module, int]:
    """Wrap the submodules of ``module`` the policy picks, deepest first, each child replaced in its
    parent by its wrapper; then ``module`` itself if the policy picks it for what is left (never
    with ``only_wrap_children``). Returns the (possibly wrapped) module and how many parameters
    were wrapped. ``kwargs`` go to ``wrapper_cls``."""
    ignored = {id(p) for p in ignored_params}
    skipped = {id(m) for m in ignored_modules}
    total = sum(p.numel() for p in module.parameters() if id(p) not in ignored)
    if not auto_wrap_policy(module=module, recurse=True, unwrapped_params=total):
        return module, 0
    wrapped = 0
    for name, child in module.named_children():
        if id(child) in skipped:
            continue
        new_child, count = recursive_wrap(
            child, auto_wrap_policy, wrapper_cls, ignored_modules, ignored_params, **kwargs
        )
        if new_child is not child:
            setattr(module, name, new_child)
        wrapped += count
    if not only_wrap_children and auto_wrap_policy(module=module, recurse=False, unwrapped_params=total - wrapped):
        return _wrap(module, wrapper_cls, **kwargs), total
    return module, wrapped
