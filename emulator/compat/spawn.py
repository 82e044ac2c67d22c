"""``torch_xla.distributed.xla_multiprocessing.spawn`` (and ``torch_xla.launch``) on the emulator.

As on Neuron, ``spawn`` starts the processes itself, one per NeuronCore: ``nprocs=None`` means
``NEURONCORE_NUM_DEVICES`` processes if that is set, else every core this process may use
(``NEURON_RT_NUM_CORES`` / ``NEURON_RT_VISIBLE_CORES``, else every core of the emulated
instance); ``nprocs=1`` runs ``fn`` in this process, as torch_xla does. Another count, up to
the cores available, is accepted too (torch_xla 2.7 refuses it and points at
``NEURONCORE_NUM_DEVICES``). Each child gets what torchrun would give it — ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT`` of a store
this process hosts — so it claims the core of its local rank and its collectives and
``init_process_group('xla')`` find the job; then it calls ``fn(index, *args)``. Children die with
the parent, however it dies (``PR_SET_PDEATHSIG``). A child that fails stops the others and the
failure is raised here (torch.multiprocessing's ``ProcessRaisedException``).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp

from emulator.lifecycle import set_parent_death_signal
from emulator.runtime.core_spec import CoreSpecError, request_from_env
from emulator.runtime.errors import NeuronRuntimeError


def _available_cores(env: Mapping[str, str]) -> int:
    """Cores this process may hand to its children."""
    try:
        request = request_from_env({k: v for k, v in env.items() if k != "LOCAL_RANK"})
    except CoreSpecError as exc:
        raise NeuronRuntimeError("NRT_INVALID", str(exc)) from None
    if request.visible_cores is not None:
        return len(request.visible_cores)
    if request.num_cores is not None:
        return request.num_cores
    from emulator.hardware import get_instance_type
    from neurontools.sources.daemon_client import DaemonClient, DaemonUnavailable

    try:
        inventory = DaemonClient().get("/inventory")
    except DaemonUnavailable as exc:
        raise NeuronRuntimeError("NRT_FAILURE", f"xmp.spawn: no emulated instance answers ({exc})") from None
    return get_instance_type(inventory["instance"]["instance_type"]).core_count


def _child(index: int, fn: Callable[..., Any], args: tuple, env: dict[str, str]) -> None:
    set_parent_death_signal(signal.SIGTERM)
    os.environ.update(env)
    os.environ["RANK"] = os.environ["LOCAL_RANK"] = str(index)
    fn(index, *args)


def spawn(
    fn: Callable[..., Any],
    args: tuple = (),
    nprocs: int | None = None,
    join: bool = True,
    daemon: bool = False,
    start_method: str = "spawn",
) -> Any:
    """Run ``fn(index, *args)`` in ``nprocs`` processes, one per NeuronCore (all of them: None)."""
    if nprocs == 1:
        return fn(int(os.environ.get("RANK", "0") or 0), *args)
    available = _available_cores(os.environ)
    wanted = os.environ.get("NEURONCORE_NUM_DEVICES", "").strip()
    count = int(nprocs) if nprocs is not None else (int(wanted) if wanted.isdigit() else available)
    if not 1 <= count <= available:
        raise ValueError(f"xmp.spawn: nprocs={nprocs} but {available} NeuronCores are available to this process")
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    env = {
        "WORLD_SIZE": str(count),
        "LOCAL_WORLD_SIZE": str(count),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(store.port),
        "TORCHELASTIC_USE_AGENT_STORE": "True",  # the children's store is this one (torchrun's convention)
    }
    context = mp.start_processes(
        _child, args=(fn, tuple(args), env), nprocs=count, join=join, daemon=daemon, start_method=start_method
    )
    if context is not None:  # join=False: the store must live as long as the children
        context._neuron_emulator_store = store
    return context


def launch(
    fn: Callable[..., Any], args: tuple = (), start_method: str = "spawn", debug_single_process: bool = False
) -> Any:
    """``torch_xla.launch``: under torchrun, ``fn(LOCAL_RANK, *args)`` in this process; else
    ``spawn`` on every available core (in this process with ``debug_single_process``)."""
    if dist.is_torchelastic_launched():
        return fn(int(os.environ.get("LOCAL_RANK", "0") or 0), *args)
    return spawn(fn, args, nprocs=1 if debug_single_process else None, start_method=start_method)
