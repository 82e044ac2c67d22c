"""The training loop of every built-in workload (its configuration: ``config.py``; what it
produces: ``results.py``, torch-free, re-exported here).

One loop for both kinds: build the task, move model and inputs to the device, then per step
``zero_grad -> loss -> backward -> xm.optimizer_step`` (gradient all-reduce across ranks, optimizer
step, ``mark_step``). Real-math workloads read the loss after the step; model-scale ones never
read a value. Each step's figures come from the emulated device (``xm.last_step()``) when it
reports them, else from this host's wall clock, and say which.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Sequence
from typing import cast

import torch

import emulator.xla as xm
from emulator.capture.dtypes import TORCH_DTYPES
from emulator.lifecycle import exit_status
from emulator.runtime.collectives import collective_error, collective_timeout
from emulator.workloads.backend import CpuBackend, XlaBackend
from emulator.workloads.config import RunConfig
from emulator.workloads.errors import report_error
from emulator.workloads.hbm import HbmPeak
from emulator.workloads.progress import Reporter, make_reporter
from emulator.workloads.results import RunHeader, RunResult, StepStats
from emulator.workloads.tasks import Task, TaskOptions, TrainableModel
from neurontools.sources.address import AddressError
from neurontools.sources.daemon_client import DaemonClient

# AdamW's default eps (1e-8) is 0 in fp16; 1e-4 is the smallest that keeps fp16 updates finite
# (measured: 1e-6 still overflows m / (sqrt(v) + eps) to inf on gpt-tiny and mlp).
ADAM_EPS = {"fp32": 1e-8, "bf16": 1e-8, "fp16": 1e-4}


def _place(batch: Sequence[torch.Tensor], device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Move the inputs to the device; cast float inputs."""
    return tuple((t.to(dtype) if t.is_floating_point() else t).to(device) for t in batch)


def _place_model(task: Task, device: torch.device, dtype: torch.dtype) -> None:
    task.model.to(dtype).to(device)


def _init_distributed(world_size: int, rank: int) -> bool:
    """Join the torchrun job's process group (gloo) when there is more than one rank; its
    collectives give up after ``NEURON_EMULATOR_COLLECTIVE_TIMEOUT`` seconds (docs/lifecycle.md)."""
    import torch.distributed as dist

    if world_size < 2 or dist.is_initialized():
        return False
    try:
        timeout = collective_timeout()
    except ValueError as exc:
        raise xm.NeuronRuntimeError("NRT_INVALID", str(exc)) from None
    try:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
    except RuntimeError as exc:  # the store or a peer never answered
        raise collective_error(exc, "joining the process group", rank=rank, timeout=timeout) from None
    return True


def _one_step(
    task: Task, optimizer: torch.optim.Optimizer, backend: XlaBackend, device: torch.device, dtype: torch.dtype
) -> float | None:
    """One optimizer step; the loss (read after the step ends) for real math, else ``None``."""
    batch = _place(next(task.batches), device, dtype)
    optimizer.zero_grad(set_to_none=True)
    loss = cast(TrainableModel, task.model).loss(*batch)
    loss.backward()
    backend.optimizer_step(optimizer)  # gradient all-reduce, optimizer.step(), mark_step()
    return float(loss.item())


def train(config: RunConfig, backend: XlaBackend, reporter: Reporter) -> RunResult:
    """Run ``config.steps`` optimizer steps; raises ``xm.NeuronRuntimeError`` from the runtime."""
    started = time.perf_counter()
    rank, world = backend.rank(), backend.world_size()
    if backend.attaches and "NEURON_PROCESS_TAG" not in os.environ:
        os.environ["NEURON_PROCESS_TAG"] = config.spec.name if world == 1 else f"{config.spec.name}-rank{rank}"
    try:
        device = backend.device()
    except ValueError as exc:  # a bad runtime setting in the environment (e.g. NEURON_CC_FLAGS)
        raise xm.NeuronRuntimeError("NRT_INVALID", str(exc)) from None
    own_group = _init_distributed(world, rank)
    try:
        options = TaskOptions(config.batch_size, config.seq_len, seed=config.seed, rank=rank, world_size=world)
        task = config.spec.build(options)
        result = RunResult(_header(config, task, backend, world))
        reporter.start(result.header)
        dtype = TORCH_DTYPES[config.dtype]
        _place_model(task, device, dtype)  # the weights' device memory is allocated here
        optimizer = torch.optim.AdamW(task.model.parameters(), lr=config.lr, eps=ADAM_EPS[config.dtype])
        hbm = HbmPeak(_daemon_client() if backend.attaches else None)
        for step in range(1, config.steps + 1):
            t0 = time.perf_counter()
            loss = _one_step(task, optimizer, backend, device, dtype)
            stats = StepStats(step, loss, time.perf_counter() - t0, config.batch_size * world, backend.last_step())
            result.steps.append(stats)
            hbm.sample()
            reporter.step(stats)
        result.wall_seconds = time.perf_counter() - started
        result.hbm_peak, result.hbm_reason = hbm.peak(), hbm.reason
        reporter.finish(result)
        return result
    finally:
        reporter.close()
        if own_group:
            import torch.distributed as dist

            dist.destroy_process_group()


def _header(config: RunConfig, task: Task, backend: XlaBackend, world: int) -> RunHeader:
    spec = config.spec
    return RunHeader(
        workload=spec.name,
        kind=spec.kind,
        parameters=task.parameters,
        world_size=world,
        neuroncores=backend.neuroncores(),
        sample_unit=spec.sample_unit,
        **config.settings(),
    )


def _daemon_client() -> DaemonClient | None:
    try:
        return DaemonClient(timeout=2.0)
    except AddressError:
        return None


def run(config: RunConfig, *, backend: XlaBackend | None = None, reporter: Reporter | None = None) -> int:
    """Train and print progress and summary (rank 0 only); exit status: 0, 1 on a runtime error."""
    backend = backend if backend is not None else XlaBackend()
    if reporter is None:
        reporter = make_reporter(quiet=backend.rank() != 0)
    try:
        train(config, backend, reporter)
    except xm.NeuronRuntimeError as exc:  # refused cores, out of device memory, no daemon, ...
        report_error(str(exc))
        return 1
    except KeyboardInterrupt as exc:  # Ctrl-C, or a stop signal (emulator.lifecycle): 128 + signal
        return exit_status(exc)
    return 0


__all__ = ["CpuBackend", "RunConfig", "RunHeader", "RunResult", "StepStats", "XlaBackend", "run", "train"]
