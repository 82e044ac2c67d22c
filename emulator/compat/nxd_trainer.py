"""``neuronx_distributed.trainer``'s API: ``neuronx_distributed_config``,
``initialize_parallel_model``, ``initialize_parallel_optimizer`` and the ``NxDModel`` /
``NxDOptimizer`` wrappers they return (docs/run-your-script.md §NxD trainer).

The config is the dict neuronx-distributed builds, its defaults filled the same way (ZeRO-1 off,
gradient clipping on at norm 1.0, master weights and FP32 gradient accumulation following ZeRO-1);
building it sets up the tensor-parallel grid. The model is built by the script's ``model_fn``,
re-initialised by ``param_init_fn`` module by module when ``meta_device_init`` asks for it, moved
to the device with the parallel tags kept, and its listed module classes wrapped for activation
checkpointing (torch's checkpoint wrapper: their forward is recomputed in the backward pass). The
optimizer step, as NxD's: the sequence-parallel gradients summed over TP, then without ZeRO-1 the
gradients averaged over DP and clipped to ``max_grad_norm``; with ZeRO-1 NxD's
:class:`~emulator.compat.nxd_zero1.NeuronZero1Optimizer` does both. Real values, real collectives.
Pipeline, expert and context parallelism, LoRA and model padding raise ``NotEmulatedError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    apply_activation_checkpointing as _torch_apply_checkpointing,
)

from emulator.compat import nxd_layers, nxd_state
from emulator.compat import xla_model as xm
from emulator.compat.gaps import NotEmulatedError
from emulator.compat.nxd_zero1 import NeuronZero1Optimizer

_CONFIG = "neuronx_distributed.neuronx_distributed_config"


def _refuse_unemulated(pp: int, ep: int, cp: int, lora_config: Any, pad_model: bool) -> None:
    for name, value in (("pipeline_parallel_size", pp), ("expert_parallel_size", ep), ("context_parallel_size", cp)):
        if value != 1:
            raise NotEmulatedError(
                f"{_CONFIG}({name}={value})", "only tensor and data parallelism run with real values"
            )
    if lora_config is not None:
        raise NotEmulatedError(f"{_CONFIG}(lora_config=...)")
    if pad_model:
        raise NotEmulatedError(f"{_CONFIG}(pad_model=True)")


def _with_defaults(given: dict | None, defaults: dict[str, Any], what: str) -> dict[str, Any]:
    if given is not None and not isinstance(given, dict):
        raise TypeError(f"{what} must be a dict")
    return {**defaults, **(given or {})}


def neuronx_distributed_config(
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    expert_parallel_size: int = 1,
    context_parallel_size: int = 1,
    pipeline_config: dict | None = None,
    optimizer_config: dict | None = None,
    activation_checkpoint_config: Any = None,
    pad_model: bool = False,
    sequence_parallel: bool = False,
    model_init_config: dict | None = None,
    lora_config: Any = None,
    mixed_precision_config: dict | None = None,
    sequential_move_factor: int = 11,
    lnc_size: int = 1,
) -> dict[str, Any]:
    """The NxD config dict, defaults filled as neuronx-distributed fills them; sets up the
    tensor/data-parallel grid when the process group exists."""
    _refuse_unemulated(pipeline_parallel_size, expert_parallel_size, context_parallel_size, lora_config, pad_model)
    optimizer = _with_defaults(optimizer_config, {"zero_one_enabled": False, "grad_clipping": True}, "optimizer_config")
    if optimizer["grad_clipping"]:
        optimizer.setdefault("max_grad_norm", 1.0)
    zero1 = bool(optimizer["zero_one_enabled"])
    mixed = _with_defaults(
        mixed_precision_config,
        {"use_master_weights": zero1, "use_fp32_grad_acc": zero1, "use_master_weights_in_ckpt": False},
        "mixed_precision_config",
    )
    init = _with_defaults(
        model_init_config,
        {"sequential_move_factor": sequential_move_factor, "meta_device_init": False, "param_init_fn": None},
        "model_init_config",
    )
    if init["meta_device_init"] and init.get("param_init_fn") is None:
        raise ValueError("param_init_fn must be provided when meta_device_init is True")
    config = {
        "tensor_parallel_size": tensor_parallel_size,
        "pipeline_parallel_size": pipeline_parallel_size,
        "expert_parallel_size": expert_parallel_size,
        "context_parallel_size": context_parallel_size,
        "pipeline_config": pipeline_config,
        "optimizer_config": optimizer,
        "activation_checkpoint_config": activation_checkpoint_config,
        "pad_model": pad_model,
        "sequence_parallel": sequence_parallel,
        "model_init_config": init,
        "lora_config": lora_config,
        "mixed_precision_config": mixed,
        "lnc_size": lnc_size,
    }
    if dist.is_available() and dist.is_initialized():
        nxd_state.initialize_model_parallel(tensor_model_parallel_size=tensor_parallel_size)
    return config


# -- the model ---------------------------------------------------------------------------------
class NxDModel(nn.Module):
    """The wrapped model: calls, parameters and state dict are the module's own (no prefix)."""

    def __init__(self, module: nn.Module, nxd_config: dict[str, Any]) -> None:
        super().__init__()
        self.module = module
        self.nxd_config = nxd_config

    def local_module(self) -> nn.Module:
        return self.module

    def original_module(self) -> nn.Module:
        return self.module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def run_train(self, *args: Any, **kwargs: Any) -> Any:
        raise NotEmulatedError("NxDModel.run_train", "it runs the pipeline engine (pipeline parallelism)")

    def named_parameters(self, *args: Any, **kwargs: Any) -> Iterator[tuple[str, nn.Parameter]]:
        return self.module.named_parameters(*args, **kwargs)

    def named_buffers(self, *args: Any, **kwargs: Any) -> Iterator[tuple[str, torch.Tensor]]:
        return self.module.named_buffers(*args, **kwargs)

    def named_children(self) -> Iterator[tuple[str, nn.Module]]:
        return self.module.named_children()

    def named_modules(self, *args: Any, **kwargs: Any) -> Iterator[tuple[str, nn.Module]]:
        return self.module.named_modules(*args, **kwargs)

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["module"], name)

    @property
    def dtype(self) -> torch.dtype:
        return next(self.module.parameters()).dtype


def _checkpointed_classes(config: Any, model: nn.Module) -> tuple[type, ...]:
    if config == "full":
        names = getattr(model, "_no_split_modules", None)
        if not names:
            raise RuntimeError(
                '`activation_checkpoint_config` "full" is only supported for Hugging Face transformers models.'
            )
        found = {type(m) for m in model.modules() if type(m).__name__ in set(names)}
        return tuple(found)
    classes = config if isinstance(config, (list, tuple)) else [config]
    if not classes or not all(isinstance(c, type) and issubclass(c, nn.Module) for c in classes):
        raise TypeError("activation_checkpoint_config must be 'full' or nn.Module classes")
    return tuple(classes)


def apply_activation_checkpointing(model: nn.Module, check_fn: Callable[[nn.Module], bool] = lambda _: True) -> None:
    """Wrap every submodule ``check_fn`` picks so its forward is recomputed in the backward pass
    (``neuronx_distributed.utils.activation_checkpoint``); parameter names are unchanged."""
    _torch_apply_checkpointing(model, check_fn=check_fn)


def initialize_parallel_model(
    nxd_config: dict[str, Any],
    model_fn: Callable[..., nn.Module],
    include_buffers: bool = False,
    *args: Any,
    **kwargs: Any,
) -> NxDModel:
    if not nxd_state.model_parallel_is_initialized():
        nxd_state.initialize_model_parallel(tensor_model_parallel_size=nxd_config["tensor_parallel_size"])
    model = model_fn(*args, **kwargs)
    init = nxd_config["model_init_config"]
    param_init_fn = init.get("param_init_fn")
    if init.get("meta_device_init") and param_init_fn is not None:
        # NxD materialises the meta-device model empty and lets param_init_fn initialise every
        # module; here the model was built with real storage and param_init_fn re-initialises it
        with torch.no_grad():
            for module in model.modules():
                param_init_fn(module, torch.device("cpu"))
    nxd_layers.move_model_to_device(model, xm.xla_device())
    wrapped = NxDModel(model, nxd_config)
    if nxd_config["activation_checkpoint_config"] is not None:
        classes = _checkpointed_classes(nxd_config["activation_checkpoint_config"], model)
        apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, classes))
    return wrapped


# -- the optimizer -----------------------------------------------------------------------------
class NxDOptimizer(torch.optim.Optimizer):
    """The wrapped optimizer; ``step`` reduces and clips the gradients first, as NxD's does."""

    def __init__(self, optimizer: torch.optim.Optimizer, nxd_config: dict[str, Any]) -> None:
        self.optimizer = optimizer
        self.nxd_config = nxd_config
        self._grad_norm: torch.Tensor | None = None
        self.params = [p for group in self.param_groups for p in group["params"]]

    def __repr__(self) -> str:
        return f"NxDOptimizer({self.optimizer!r})"

    @property
    def grad_norm(self) -> torch.Tensor | None:
        return self._grad_norm

    @property
    def state(self) -> Any:
        return self.optimizer.state

    @state.setter
    def state(self, value: Any) -> None:
        self.optimizer.state = value

    @property
    def param_groups(self) -> Any:
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value: Any) -> None:
        self.optimizer.param_groups = value

    @property
    def defaults(self) -> Any:
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, value: Any) -> None:
        self.optimizer.defaults = value

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optimizer.add_param_group(param_group)

    def state_dict(self) -> Any:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: Any) -> None:
        self.optimizer.load_state_dict(state_dict)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def __getstate__(self) -> Any:
        return self.optimizer.__getstate__()

    def __setstate__(self, state: Any) -> None:
        self.optimizer.__setstate__(state)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        if self.nxd_config["sequence_parallel"]:
            nxd_layers.allreduce_sequence_parallel_gradients(self)
        config = self.nxd_config["optimizer_config"]
        if not config["zero_one_enabled"]:
            grads = [p.grad for p in self.params if p.grad is not None]
            nxd_layers.bucket_allreduce_gradients(grads)
            if config["grad_clipping"]:
                self._grad_norm = nxd_layers.clip_grad_norm(self.params, config["max_grad_norm"])
        result = self.optimizer.step(closure=closure)
        if config["zero_one_enabled"]:
            self._grad_norm = self.optimizer.grad_norm  # type: ignore[attr-defined]
        return result


def _zero1_optimizer(
    nxd_config: dict[str, Any], optimizer_class: type, parameters: Any, **defaults: Any
) -> NeuronZero1Optimizer:
    config, mixed = nxd_config["optimizer_config"], nxd_config["mixed_precision_config"]
    options: dict[str, Any] = {
        "grad_clipping": config["grad_clipping"],
        "max_norm": config.get("max_grad_norm", 1.0),
        "pin_layout": False,
        "sharding_groups": nxd_state.get_data_parallel_replica_groups(),
        "grad_norm_groups": nxd_state.get_tensor_model_parallel_replica_groups(),
        "save_master_weights": bool(mixed["use_master_weights_in_ckpt"]),
    }
    # the shards are in the optimizer dtype, FP32 (torch_xla's default; NxD asks for FP64 only
    # under XLA_DOWNCAST_BF16, which exec does not emulate)
    if mixed["use_fp32_grad_acc"]:
        options.update(use_grad_acc_hook=True, higher_cc_precision=True)
    defaults.pop("decoupled_weight_decay", None)
    return NeuronZero1Optimizer(parameters, optimizer_class, **options, **defaults)


def initialize_parallel_optimizer(
    nxd_config: dict[str, Any], optimizer_class: type, parameters: Any, **defaults: Any
) -> NxDOptimizer:
    mixed = nxd_config["mixed_precision_config"]
    if nxd_config["optimizer_config"]["zero_one_enabled"]:
        optimizer: torch.optim.Optimizer = _zero1_optimizer(nxd_config, optimizer_class, parameters, **defaults)
    else:
        if mixed["use_master_weights"]:
            raise RuntimeError("ZeRO-1 optimizer is not enabled, while `use_master_weights` is True.")
        if mixed["use_fp32_grad_acc"] or mixed["use_master_weights_in_ckpt"]:
            raise RuntimeError(
                "Non Zero-1 optimizer does not support `use_fp32_grad_acc` of `use_master_weights_in_ckpt`."
            )
        optimizer = optimizer_class(parameters, **defaults)
    return NxDOptimizer(optimizer, nxd_config)
