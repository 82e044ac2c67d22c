"""What capture + cost model add to a training step, measured against plain PyTorch in one run.

    python benchmarks/capture_overhead.py [--steps 20]

1. gpt-tiny, one training step (forward, backward, AdamW) on the host: plain PyTorch versus the
   same step on the emulated device (every op captured and recorded, HBM ledger, graph hash and
   cost model at the step's end). Neither side sleeps for simulated device time or talks to a
   daemon: this is the emulator's own overhead. Target: ratio <= 1.15.
2. gpt3-6.7b (model scale, meta tensors): wall time to capture and cost one step after the first
   (the first one compiles). Target: <= 1 s. The 16 GiB per-core limit is lifted for this
   measurement only (the model needs ~107 GB with AdamW state; it does not fit one NeuronCore).

Prints figures; asserts nothing. Medians over ``--steps`` steps after warm-up.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import _pop_mode, _push_mode

from emulator.capture import tensor as dt
from emulator.capture.recorder import Recorder
from emulator.costmodel import CostOptions, cost_graph
from emulator.hardware import NEURONCORE_V2
from emulator.runtime.compile_cache import graph_hash
from emulator.runtime.memory import MemoryLedger
from emulator.workloads import get_workload
from emulator.workloads.tasks import TaskOptions


def timed(step: Callable[[], None], steps: int, warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return times


class CaptureOnly:
    """The in-process half of the emulated device: hooks, recorder, ledger, cost per graph."""

    def __init__(self, capacity: int) -> None:
        self.recorder = Recorder()
        self.ledger = MemoryLedger(
            core=0, device=0, local_core=0, capacity=capacity, runtime_memory=1088, code_overhead=0
        )
        self.costs: dict[str, object] = {}
        self.digests: dict[tuple, str] = {}
        self.options = CostOptions()

    def __enter__(self) -> CaptureOnly:
        dt.hooks.on_op, dt.hooks.on_alloc = self.recorder.on_op, self.ledger.on_alloc
        _push_mode(dt.DeviceMode())
        return self

    def __exit__(self, *exc: object) -> None:
        _pop_mode()
        dt.hooks.on_op = dt.hooks.on_alloc = None
        dt.hooks.meta_mode = False

    def end_step(self) -> None:
        # what DeviceRuntime.mark_step does on the host (minus reporting and the simulated wait)
        captured = self.recorder.take_graph()
        digest = self.digests.get(captured.key)
        if digest is None:
            ops = captured.ops()
            digest = self.digests[captured.key] = graph_hash(ops)
            self.costs[digest] = cost_graph(ops, self.options, NEURONCORE_V2)


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, batch: tuple) -> None:
    opt.zero_grad(set_to_none=True)
    loss = model.loss(*batch)
    loss.backward()
    opt.step()


def gpt_tiny_ratio(steps: int) -> None:
    spec = get_workload("gpt-tiny")
    options = TaskOptions(batch_size=spec.batch_size, seq_len=spec.seq_len)

    task = spec.build(options)
    batch = next(task.batches)
    opt = torch.optim.AdamW(task.model.parameters(), lr=1e-3)
    plain = timed(lambda: train_step(task.model, opt, batch), steps)

    with CaptureOnly(capacity=16 * 2**30) as dev:
        task = spec.build(options)
        model = task.model.to(dt.DEVICE)
        dbatch = tuple(t.to(dt.DEVICE) for t in next(task.batches))
        dopt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step() -> None:
            train_step(model, dopt, dbatch)
            dev.end_step()

        emulated = timed(step, steps)
    p, e = statistics.median(plain), statistics.median(emulated)
    print("gpt-tiny training step (batch 16 x seq 128, fp32, AdamW), host wall time, median")
    print(f"  plain PyTorch            {p * 1e3:8.1f} ms")
    print(f"  capture + cost model     {e * 1e3:8.1f} ms")
    print(f"  ratio                    {e / p:8.3f}x   (target <= 1.15x)")


def gpt3_step_time(steps: int) -> None:
    spec = get_workload("gpt3-6.7b")
    options = TaskOptions(batch_size=1, seq_len=2048)
    with CaptureOnly(capacity=2**50) as dev:
        task = spec.build(options)
        model = task.model.to(torch.bfloat16).to(dt.DEVICE)
        batch = tuple(t.to(dt.DEVICE) for t in next(task.batches))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        t0 = time.perf_counter()
        train_step(model, opt, batch)
        dev.end_step()
        first = time.perf_counter() - t0

        def step() -> None:
            train_step(model, opt, batch)
            dev.end_step()

        later = timed(step, steps, warmup=1)
    graph = next(iter(dev.costs.values()))
    print("gpt3-6.7b training step (meta, batch 1 x seq 2048, bf16, AdamW), host wall time")
    print(f"  first step (new graphs)  {first:8.3f} s")
    print(f"  later steps, median      {statistics.median(later):8.3f} s   (target <= 1 s)")
    print(f"  ops per step             {graph.op_count:8d}")
    print(f"  simulated device time    {graph.device_seconds:8.3f} s per step on one NeuronCore")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    gpt_tiny_ratio(args.steps)
    print()
    gpt3_step_time(max(3, args.steps // 5))


if __name__ == "__main__":
    main()
