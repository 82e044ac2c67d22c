"""The native device backend (device ``xla``): real values, op capture in C++, device memory.

In-process, no daemon. The backend is compiled by ``make setup``; these tests need it (they fail,
not skip, where it cannot be built: the Python layer is the fallback, not the product).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch
from torch.utils._python_dispatch import _pop_mode, _push_mode

from emulator.capture import native
from emulator.capture import tensor as dt
from emulator.capture.recorder import Recorder
from emulator.costmodel import CostOptions, cost_graph
from emulator.hardware import NEURONCORE_V2
from emulator.runtime.errors import NeuronRuntimeError
from emulator.runtime.memory import MemoryLedger

GIB = 2**30
XLA = native.DEVICE


@pytest.fixture
def ledger() -> Iterator[MemoryLedger]:
    """A core's ledger that the native backend counts against; recording on, graph emptied."""
    gc.collect()  # the device tensors of earlier tests (in reference cycles) are gone
    ledger = MemoryLedger(core=0, device=0, local_core=0, capacity=16 * GIB, runtime_memory=1088, code_overhead=0)
    module = native.start(ledger.out_of_memory)
    assert module is not None, "the native device backend did not load (python -m emulator.capture.native.build)"
    ledger.use_native(module, native.parameters)
    native.take_graph()
    yield ledger
    native.take_graph()
    module.set_capacity(2**62)


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 1))


def train(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int) -> list[float]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return torch.randn(32, 8, generator=gen), torch.randn(32, 1, generator=gen)


def test_training_on_xla_computes_what_the_cpu_does_and_records_every_op(ledger) -> None:
    x, y = batch()
    ref = tiny_model()
    ref_losses = train(ref, x, y, 3)
    model = tiny_model().to(XLA)
    assert model[0].weight.device == XLA and isinstance(model[0].weight, torch.nn.Parameter)
    native.take_graph()
    losses = train(model, x.to(XLA), y.to(XLA), 3)
    assert losses == pytest.approx(ref_losses, abs=1e-6)
    assert torch.allclose(model[0].weight.cpu(), ref[0].weight.detach(), atol=1e-6)
    graph = native.take_graph()
    assert graph is not None
    names = {op.name for op in graph.ops()}
    # forward, backward (autograd's device thread), optimizer, transfers both ways (.to, .item)
    assert {"aten.addmm", "aten.mm", "aten.gelu", "aten.gelu_backward", "aten.addcdiv_"} <= names
    assert {"emulator.host_to_device", "emulator.device_to_host"} <= names
    assert len(graph) == len(graph.ops())


def test_flops_are_pytorchs_count_and_the_cost_matches_the_python_layer(ledger) -> None:
    x, y = batch()
    model = tiny_model().to(XLA)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(m: torch.nn.Module, o: torch.optim.Optimizer, a: torch.Tensor, b: torch.Tensor) -> None:
        o.zero_grad()
        torch.nn.functional.mse_loss(m(a), b).backward()
        o.step()

    xd, yd = x.to(XLA), y.to(XLA)
    native.take_graph()
    step(model, opt, xd, yd)
    graph = native.take_graph()
    assert graph is not None
    native_ops = graph.ops()

    recorder = Recorder()
    python_ledger = MemoryLedger(core=0, device=0, local_core=0, capacity=GIB, runtime_memory=0, code_overhead=0)
    dt.hooks.on_op, dt.hooks.on_alloc = recorder.on_op, python_ledger.on_alloc
    _push_mode(dt.DeviceMode())
    try:
        pmodel = tiny_model().to(dt.DEVICE)
        popt = torch.optim.SGD(pmodel.parameters(), lr=0.1)
        xp, yp = x.to(dt.DEVICE), y.to(dt.DEVICE)
        recorder.take()
        step(pmodel, popt, xp, yp)
        python_ops = recorder.take()
    finally:
        _pop_mode()
        dt.hooks.on_op = dt.hooks.on_alloc = None
    # forward 2 x 32x8x16 + 32x16x1 multiply-adds; backward twice that, less the input gradient
    expected = 2 * (32 * 8 * 16 + 32 * 16 * 1) * 3 - 2 * 32 * 8 * 16
    assert sum(op.flops for op in native_ops) == sum(op.flops for op in python_ops) == expected
    native_cost = cost_graph(native_ops, CostOptions(), NEURONCORE_V2).device_seconds
    python_cost = cost_graph(python_ops, CostOptions(), NEURONCORE_V2).device_seconds
    assert native_cost == pytest.approx(python_cost, rel=0.25)


def test_the_graph_key_repeats_for_identical_steps_and_changes_with_shapes(ledger) -> None:
    model = tiny_model().to(XLA)
    native.take_graph()  # (the weights' transfer)

    def forward(rows: int) -> tuple:
        model.zero_grad(set_to_none=True)  # (gradients accumulated into would be another graph)
        model(torch.ones(rows, 8, device=XLA)).sum().backward()
        graph = native.take_graph()
        assert graph is not None and len(graph) > 0
        return graph.key

    first = forward(4)
    assert forward(4) == first
    assert forward(5) != first
    assert forward(4) == first


def test_device_memory_is_counted_per_storage_and_freed(ledger) -> None:
    module = native.backend()
    assert module is not None
    before = module.live_bytes()
    a = torch.zeros(1024, device=XLA)
    assert module.live_bytes() == before + 4096
    view = a[10:20]
    view.add_(1)
    assert module.live_bytes() == before + 4096  # a view holds no memory of its own
    assert float(a.sum()) == 10.0  # and writes through to its base
    del a, view
    assert module.live_bytes() == before


def test_parameters_are_constants_and_an_allocation_past_the_core_is_nrt_resource(ledger) -> None:
    model = tiny_model().to(XLA)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    assert ledger.usage().constants == param_bytes
    module = native.backend()
    assert module is not None
    live = module.live_bytes()
    with pytest.raises(NeuronRuntimeError) as err:
        torch.empty(17 * GIB // 4, dtype=torch.float32, device=XLA)
    assert err.value.status == "NRT_RESOURCE"
    assert module.live_bytes() == live  # nothing was allocated
    del model


def test_a_nan_is_an_error_of_the_execution_that_wrote_it(ledger) -> None:
    module = native.backend()
    assert module is not None
    module.non_finite()  # (what earlier work wrote)
    unwritten = torch.empty(1 << 16, device=XLA)  # never written: whatever the memory held is no output
    assert not module.non_finite()
    bad = torch.tensor([1.0, 0.0], device=XLA) / torch.tensor([1.0, 0.0], device=XLA)
    assert module.non_finite()
    assert not module.non_finite()  # not written again since
    bad.mul_(2)
    assert module.non_finite()
    del bad, unwritten


def test_only_the_written_part_of_a_storage_is_checked(ledger) -> None:
    """A host kernel's result can be a small view of a larger buffer (mse_loss's scalar sits in
    a batch-sized one) whose other bytes are stale memory: they are no output of the execution."""
    module = native.backend()
    assert module is not None
    buf = torch.full((8,), float("nan"), device=XLA)
    assert module.non_finite()
    buf[2:4].fill_(1.0)
    assert not module.non_finite()  # the NaNs around the slice were not written this time
    buf[5:6].fill_(float("inf"))
    assert module.non_finite()


def test_out_variants_resizes_in_place_views_and_host_views(ledger) -> None:
    assert torch.arange(5, device=XLA).cpu().tolist() == [0, 1, 2, 3, 4]
    out = torch.empty(0, device=XLA)
    torch.add(torch.ones(3, device=XLA), 2, out=out)
    assert out.shape == (3,) and out.cpu().tolist() == [3.0, 3.0, 3.0]
    m = torch.arange(6, dtype=torch.float32, device=XLA).reshape(2, 3)
    m.t_()
    assert m.shape == (3, 2) and m.cpu()[0].tolist() == [0.0, 3.0]
    host = native.host_view(m)
    assert host.device.type == "cpu"
    host.mul_(2)  # a host collective writes through to the device tensor
    assert m.cpu()[0].tolist() == [0.0, 6.0]


def test_a_meta_tensor_sent_to_xla_is_pytorchs_error(ledger) -> None:
    # values that do not exist cannot land on a device that computes them (model-scale work
    # goes to emulator.xla.model_scale_device(), the Python layer)
    with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor"):
        torch.empty(4, device="meta").to(XLA)


def test_neuron_emulator_capture_python_keeps_the_python_layer() -> None:
    code = "from emulator.capture import native; print(native.backend() is None)"
    env = dict(os.environ, NEURON_EMULATOR_CAPTURE="python")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def test_a_script_that_ends_right_after_backward_exits_cleanly() -> None:
    # autograd's own device thread used to release the finished backward's state while Python
    # was finalising: the process aborted about one run in three (docs/capture.md)
    code = (
        "import torch\n"
        "from emulator.capture import native\n"
        "native.start(lambda n: RuntimeError(n))\n"
        "lin = torch.nn.Linear(4, 4).to('xla')\n"
        "lin(torch.randn(2, 4).to('xla')).sum().backward()\n"
        "print(lin.weight.grad.device)\n"
    )
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert (out.returncode, out.stdout.strip()) == (0, "xla:0"), out.stderr
