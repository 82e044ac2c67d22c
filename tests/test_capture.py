"""Device tensors, op capture and the HBM ledger, in-process (no daemon)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch.utils._python_dispatch import _pop_mode, _push_mode

from emulator.capture import tensor as dt
from emulator.capture.recorder import Recorder
from emulator.runtime.errors import NeuronRuntimeError
from emulator.runtime.memory import MemoryLedger, format_bytes

GIB = 2**30


@pytest.fixture
def device() -> Iterator[tuple[Recorder, MemoryLedger]]:
    recorder = Recorder()
    ledger = MemoryLedger(core=0, device=0, local_core=0, capacity=16 * GIB, runtime_memory=1088, code_overhead=0)
    dt.hooks.on_op, dt.hooks.on_alloc, dt.hooks.meta_mode = recorder.on_op, ledger.on_alloc, False
    _push_mode(dt.DeviceMode())
    try:
        yield recorder, ledger
    finally:
        _pop_mode()
        dt.hooks.on_op = dt.hooks.on_alloc = None
        dt.hooks.meta_mode = False


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 1))


def test_training_on_the_device_matches_plain_cpu(device) -> None:
    recorder, _ = device
    x, y = torch.randn(32, 8, generator=torch.Generator().manual_seed(1)), torch.randn(32, 1)
    ref = tiny_model()
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    model = tiny_model().to(dt.DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    assert model[0].weight.device == dt.DEVICE and isinstance(model[0].weight, torch.nn.Parameter)
    xd, yd = x.to(dt.DEVICE), y.to(dt.DEVICE)
    for _ in range(3):
        for m, o, a, b in ((ref, ref_opt, x, y), (model, opt, xd, yd)):
            o.zero_grad()
            loss = torch.nn.functional.mse_loss(m(a), b)
            loss.backward()
            o.step()
    assert torch.allclose(model[0].weight.cpu(), ref[0].weight.detach(), atol=1e-6)
    names = {op.name for op in recorder.take()}
    assert {"aten.addmm", "aten.mm", "aten.gelu", "aten.gelu_backward", "emulator.host_to_device"} <= names
    assert recorder.take() == []  # take() starts a new graph


def test_flops_of_a_matmul_are_pytorchs_count(device) -> None:
    recorder, _ = device
    a, b = torch.randn(64, 128).to(dt.DEVICE), torch.randn(128, 32).to(dt.DEVICE)
    recorder.take()
    _ = a @ b
    [op] = [op for op in recorder.take() if op.name == "aten.mm"]
    assert op.flops == 2 * 64 * 128 * 32
    assert op.inputs[0].shape == (64, 128) and op.inputs[0].dtype == "float32" and op.outputs[0].nbytes == 64 * 32 * 4


def test_host_copies_leave_the_device_and_item_works(device) -> None:
    t = torch.arange(6, dtype=torch.float32).to(dt.DEVICE)
    host = t.cpu()
    assert type(host) is torch.Tensor and host.device.type == "cpu"
    assert t.sum().item() == 15.0
    assert torch.zeros(3, device=dt.DEVICE).device == dt.DEVICE


def test_ledger_counts_storages_once_and_frees_them(device) -> None:
    _, ledger = device
    base = torch.zeros(1024, 1024).to(dt.DEVICE)  # 4 MiB
    views = [base.view(-1), base[2:], base.t()]
    assert ledger.usage().tensors == 4 * 2**20
    del base, views
    import gc

    gc.collect()
    assert ledger.usage().tensors == 0


def test_parameters_are_constants(device) -> None:
    _, ledger = device
    model = torch.nn.Linear(256, 256).to(dt.DEVICE)  # (256*256 + 256) * 4 bytes
    activations = model(torch.randn(4, 256).to(dt.DEVICE))
    usage = ledger.usage()
    assert usage.constants == (256 * 256 + 256) * 4
    assert usage.tensors == 2 * 4 * 256 * 4  # the input and the output
    assert activations.shape == (4, 256)


def test_meta_tensors_model_scale_without_data(device) -> None:
    recorder, ledger = device
    with torch.device("meta"):
        model = torch.nn.Linear(4096, 4096)
    model = model.to(dt.DEVICE)
    assert dt.hooks.meta_mode and dt.unwrap(model.weight).is_meta
    out = model(torch.randn(8, 4096, device="meta").to(dt.DEVICE))
    out.sum().backward()
    assert ledger.usage().constants == (4096 * 4096 + 4096) * 4
    flops = sum(op.flops for op in recorder.take())
    assert flops == 2 * (2 * 8 * 4096 * 4096)  # forward addmm + weight-gradient mm (the input needs no grad)


def test_out_of_memory_is_the_runtimes_error_and_allocates_nothing(device) -> None:
    _, ledger = device
    with torch.device("meta"):
        big = torch.empty(3, GIB, dtype=torch.float32)  # 12 GiB
    keep = big.to(dt.DEVICE)
    with pytest.raises(NeuronRuntimeError) as err:
        torch.empty(2, GIB, dtype=torch.float32, device="meta").to(dt.DEVICE)  # +8 GiB > 16 GiB
    assert err.value.status == "NRT_RESOURCE"
    assert "Failed to allocate 8.000GB (alignment: none, usage: tensors) on ND 0:NC 0" in str(err.value)
    assert 'status=4 message="Allocation Failure"' in str(err.value)
    assert "* total: 12.000GB" in str(err.value)
    assert ledger.usage().tensors == 12 * GIB and keep.shape == (3, GIB)


def test_format_bytes_like_the_runtime() -> None:
    assert format_bytes(172 * 2**20) == "172.000MB"
    assert format_bytes(1088) == "1.062KB"
    assert format_bytes(17024000000) == "15.855GB"
