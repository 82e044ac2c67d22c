"""``torch_xla.core.xla_model`` on the emulator (docs/run-your-script.md).

The device is the emulator's native ``xla`` device: ops run for real on the CPU and are recorded;
``mark_step`` executes the step's graph on the process's emulated NeuronCore (compile, cost,
report to the daemon, wait for the simulated device time: docs/capture.md). Ranks come from
torchrun or ``xmp.spawn`` (:mod:`emulator.compat.world`); collectives are real and costed
(:mod:`emulator.compat.collectives`).

Differences from torch_xla, all of them about time, none about values: ops run eagerly, so a
value read on the host (``loss.item()``) is ready at once and does not end the step; an
execution has finished when ``mark_step`` returns, so ``wait_device_ops`` has nothing to wait for.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from typing import IO, Any

import torch

from emulator import xla as _device
from emulator.compat import collectives, hlo_snapshot, world
from emulator.compat.gaps import NotEmulatedError

REDUCE_SUM = "sum"
REDUCE_MUL = "mul"
REDUCE_AND = "and"
REDUCE_OR = "or"
REDUCE_MIN = "min"
REDUCE_MAX = "max"

DEVICE_HW = "NEURON"  # what torch_xla reports for a NeuronCore (xla_device_hw, runtime.device_type)


# -- the device ----------------------------------------------------------------------------------
def xla_device(n: int | None = None, devkind: str | None = None) -> torch.device:
    """The process's NeuronCore as device ``xla:0``; attaches to the emulated instance (once)."""
    if n not in (None, 0):
        raise ValueError(
            f"xla:{n}: each process drives one NeuronCore, device xla:0 (torchrun starts one process per core)"
        )
    if devkind not in (None, "NEURON", "TPU", "CPU", "GPU"):
        raise ValueError(f"unknown device kind {devkind!r}")
    return require_native()


def require_native() -> torch.device:
    """Attach (once) and return the native device; a clear error where it cannot serve."""
    runtime = _device.device_runtime()
    if runtime.native is None:
        raise NotEmulatedError(
            "torch_xla on the Python device layer",
            "the native device backend is off (XLA_USE_BF16 / XLA_DOWNCAST_BF16 set, NEURON_EMULATOR_CAPTURE=python, "
            "or it could not be built); cast the model with .to(torch.bfloat16) instead of XLA_USE_BF16",
        )
    from emulator.capture.native import DEVICE

    return DEVICE


def xla_device_hw(device: torch.device | str) -> str:
    kind = torch.device(device).type
    if kind != "xla":
        raise ValueError(f"{device} is not an xla device")
    return DEVICE_HW


def get_xla_supported_devices(devkind: str | None = None, max_devices: int | None = None) -> list[str]:
    return ["xla:0"]


def is_xla_tensor(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "xla"


# -- ranks ---------------------------------------------------------------------------------------
def xrt_world_size(defval: int = 1) -> int:
    return world.world_size()


def get_ordinal(defval: int = 0) -> int:
    return world.global_rank()


def get_local_ordinal(defval: int = 0) -> int:
    return world.local_rank()


def is_master_ordinal(local: bool = True) -> bool:
    return (world.local_rank() if local else world.global_rank()) == 0


def master_print(*args: Any, fd: IO[str] = sys.stdout, local: bool = False, flush: bool = False) -> None:
    """``print`` on the job's first rank only (each host's first with ``local=True``)."""
    if is_master_ordinal(local=local):
        print(*args, file=fd, flush=flush)


# -- steps ---------------------------------------------------------------------------------------
_closures = threading.local()


def _pending() -> list[tuple[Callable[..., Any], tuple]]:
    pending = getattr(_closures, "items", None)
    if pending is None:
        pending = _closures.items = []
    return pending


def add_step_closure(closure: Callable[..., Any], args: tuple = (), run_async: bool = False) -> None:
    """Run ``closure(*args)`` after the next ``mark_step`` has executed the step (in the order added)."""
    _pending().append((closure, tuple(args)))


def mark_step(wait: bool = False, reset_scope: bool = True) -> None:
    """End the step: execute its graph on the NeuronCore, then run the step closures."""
    _device.mark_step()
    hlo_snapshot.after_execution("step", world.local_rank())
    pending = _pending()
    while pending:
        closure, args = pending.pop(0)
        closure(*args)


def wait_device_ops(devices: Sequence[str] = ()) -> None:
    """Executions are complete when ``mark_step`` returns: nothing is left to wait for."""


def optimization_barrier_(tensors: Sequence[torch.Tensor]) -> None:
    """A compiler scheduling hint in torch_xla; the values are unchanged, and so they are here."""


# -- collectives ---------------------------------------------------------------------------------
def all_reduce(
    reduce_type: str,
    inputs: torch.Tensor | list[torch.Tensor],
    scale: float = 1.0,
    groups: Any = None,
    pin_layout: bool = True,
) -> Any:
    """Reduce over the replica group; a tensor gives a new tensor, a list is reduced in place.
    In a job of one process torch_xla returns a copy (a tensor) or the list untouched, without
    applying ``scale``; so does this."""
    if world.world_size() == 1:
        return inputs.clone() if isinstance(inputs, torch.Tensor) else inputs
    group = collectives.group_among(groups)
    if isinstance(inputs, torch.Tensor):
        return group.all_reduce(inputs, reduce_type, scale)
    group.all_reduce_(list(inputs), reduce_type, scale)
    return inputs


def collective_broadcast(
    tensors: list[torch.Tensor], root_ordinal: int = 0, groups: Any = None, pin_layout: bool = True
) -> None:
    """Overwrite ``tensors`` in place with the root ordinal's values (a sum in which only the
    root contributes, as torch_xla builds it)."""
    if world.world_size() == 1:
        return
    keep = 1.0 if world.global_rank() == root_ordinal else 0.0
    with torch.no_grad():
        for t in tensors:
            t.mul_(keep)
        collectives.group_among(groups).all_reduce_(list(tensors), REDUCE_SUM, 1.0)


def set_replication(device: torch.device | str, devices: Sequence[str]) -> None:
    """torch_xla's replication set-up. Each process drives one device (``xla:0``) and its
    collectives already span the job's processes, so there is nothing to set up; a device list
    naming another device is refused as torch_xla would."""
    if any(str(d) not in ("xla:0", "xla") for d in [device, *devices]):
        raise ValueError(f"set_replication: each process drives one NeuronCore, xla:0 (got {device}, {list(devices)})")


def all_gather(
    value: torch.Tensor, dim: int = 0, groups: Any = None, output: torch.Tensor | None = None, pin_layout: bool = True
) -> torch.Tensor:
    result = collectives.group_among(groups).all_gather(value, dim)
    if output is None:
        return result
    output.copy_(result)
    return output


def reduce_scatter(
    reduce_type: str,
    input: torch.Tensor,
    scale: float,
    scatter_dim: int,
    shard_count: int,
    groups: Any = None,
    output: torch.Tensor | None = None,
    pin_layout: bool = True,
) -> torch.Tensor:
    group = collectives.group_among(groups)
    if shard_count != group.size:
        raise ValueError(f"reduce_scatter: shard_count {shard_count} but the replica group has {group.size} ranks")
    result = group.reduce_scatter(input, scatter_dim, reduce_type, scale)
    if output is None:
        return result
    output.copy_(result)
    return output


def _fetch_gradients(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]


def reduce_gradients(optimizer: torch.optim.Optimizer, groups: Any = None, pin_layout: bool = True) -> None:
    """Sum the gradients over the replica group (all ranks by default) and divide them by the
    job's world size — the whole world's, even for a data-parallel subgroup, as torch_xla does."""
    size = world.world_size()
    if size > 1:
        collectives.group_among(groups).all_reduce_(_fetch_gradients(optimizer), REDUCE_SUM, 1.0 / size)


def optimizer_step(
    optimizer: torch.optim.Optimizer,
    barrier: bool = False,
    optimizer_args: dict | None = None,
    groups: Any = None,
    pin_layout: bool = True,
) -> Any:
    """Average the gradients over the ranks, step the optimizer; ``barrier=True`` also ends the step."""
    reduce_gradients(optimizer, groups=groups)
    loss = optimizer.step(**(optimizer_args or {}))
    if barrier:
        mark_step()
    return loss


def broadcast_master_param(model: torch.nn.Module) -> None:
    """Every rank's parameters and buffers become rank 0's; then the step ends."""
    tensors = [p.data for p in model.parameters()] + list(model.buffers())
    if world.world_size() > 1 and tensors:
        collectives.group(None).broadcast_(tensors, 0)
    mark_step()


def rendezvous(tag: str, payload: bytes = b"", replicas: Sequence[int] = ()) -> list[bytes]:
    """End the step, wait for every rank, return each rank's ``payload`` (in rank order).
    Only a rendezvous of every rank exists in torch_xla; ``replicas`` naming fewer is refused."""
    if replicas and sorted(replicas) != list(range(world.world_size())):
        raise ValueError(f"rendezvous {tag!r}: replicas {list(replicas)} must name every rank of the job")
    mark_step()
    payloads = collectives.group(None).gather_objects(bytes(payload))
    return [bytes(p) for p in payloads]  # type: ignore[call-overload]


def mesh_reduce(tag: str, data: Any, reduce_fn: Callable[[list[Any]], Any]) -> Any:
    """``reduce_fn`` of every rank's ``data``, in rank order (tensors travel as host copies)."""
    mark_step()
    values = collectives.group(None).gather_objects(_to_cpu(data))
    return reduce_fn(values)


# -- host data -----------------------------------------------------------------------------------
def _to_cpu(data: Any) -> Any:
    from torch.utils._pytree import tree_map

    return tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, data)


def _maybe_convert_to_cpu(data: Any, convert: bool = True) -> Any:
    """torch_xla's helper (the BERT sample saves its checkpoint with it): every device tensor in
    nested ``data`` copied to the host."""
    return _to_cpu(data) if convert else data


def _move(data: Any, device: torch.device | str) -> Any:
    from torch.utils._pytree import tree_map

    return tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, data)


def send_cpu_data_to_device(datas: Any, device: torch.device | str, input_sharding: Any = None) -> Any:
    if input_sharding is not None:
        raise NotEmulatedError("torch_xla.core.xla_model.send_cpu_data_to_device(input_sharding=...)", "SPMD")
    return _move(datas, device)


def save(data: Any, file_or_path: Any, master_only: bool = True, global_master: bool = False) -> None:
    """``torch.save`` of ``data`` with its tensors moved to the host, by each host's first rank
    (the job's first with ``global_master``, every rank without ``master_only``). No rendezvous:
    as in torch_xla, a script that needs one calls ``rendezvous`` itself."""
    if not master_only or is_master_ordinal(local=not global_master):
        torch.save(_to_cpu(data), file_or_path)


def set_rng_state(seed: int, device: Any = None) -> None:
    torch.manual_seed(int(seed))


def get_rng_state(device: Any = None) -> int:
    return torch.initial_seed()


def get_memory_info(device: Any = None) -> dict[str, int]:
    """The NeuronCore's device memory: in use, its capacity, the peak (the emulator's HBM ledger)."""
    runtime = _device.device_runtime()
    ledger = runtime.ledger
    return {"bytes_used": ledger.usage().total, "bytes_limit": ledger.capacity, "peak_bytes_used": ledger.peak}
