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


# -- the fast per-op path records exactly what the plain one does ------------------------------
class ReferenceRecorder:
    """The straightforward recorder: every tensor among the arguments and results by pytree,
    FLOPs from PyTorch's formula on every call. Not a ``Recorder``, so the device layer calls it
    the general way (and with ``hooks.fast_path = False`` every meta kernel runs)."""

    def __init__(self) -> None:
        self.ops: list[tuple] = []

    def on_op(self, name: str, func: object, args: tuple, kwargs: dict, out: object) -> None:
        from torch.utils._pytree import tree_leaves
        from torch.utils.flop_counter import flop_registry

        def sig(tree: object) -> tuple:
            return tuple((t.shape, t.dtype) for t in tree_leaves(tree) if isinstance(t, torch.Tensor))

        flops = 0
        formula = flop_registry.get(func._overloadpacket)  # type: ignore[attr-defined]
        if formula is not None:
            try:
                flops = int(formula(*args, **kwargs, out_val=out))
            except Exception:
                flops = 0
        self.ops.append((name, sig((list(args), list(kwargs.values()))), sig(out), flops))

    def take(self) -> tuple:
        ops, self.ops = tuple(self.ops), []
        return ops


def _train_steps(workload: str, steps: int, *, fast: bool) -> tuple[list[tuple], list[tuple]]:
    """``steps`` training steps of a workload on the device; per step the captured graph key and
    the ledger's (usage, peak). ``fast``: Recorder + per-op caches; else the reference path."""
    from emulator.capture.dtypes import TORCH_DTYPES
    from emulator.workloads import get_workload
    from emulator.workloads.tasks import TaskOptions

    spec = get_workload(workload)
    recorder, reference = Recorder(), ReferenceRecorder()
    ledger = MemoryLedger(core=0, device=0, local_core=0, capacity=2**50, runtime_memory=1088, code_overhead=0)
    dt.hooks.on_op = recorder.on_op if fast else reference.on_op
    dt.hooks.on_alloc, dt.hooks.meta_mode, dt.hooks.fast_path = ledger.on_alloc, False, fast
    _push_mode(dt.DeviceMode())
    keys, memory = [], []
    try:
        task = spec.build(TaskOptions(batch_size=spec.batch_size, seq_len=spec.seq_len))
        model = task.model.to(TORCH_DTYPES[spec.dtype]).to(dt.DEVICE)
        batch = tuple(t.to(dt.DEVICE) for t in next(task.batches))
        opt = torch.optim.AdamW(model.parameters(), lr=spec.lr)
        recorder.take_graph(), reference.take()  # loading is not a step
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            model.loss(*batch).backward()
            opt.step()
            keys.append(recorder.take_graph().key if fast else reference.take())
            memory.append((ledger.usage(), ledger.peak))
        del model, batch, opt, task
    finally:
        _pop_mode()
        dt.hooks.on_op = dt.hooks.on_alloc = None
        dt.hooks.meta_mode, dt.hooks.fast_path = False, True
    return keys, memory


@pytest.mark.parametrize("workload", ["gpt-tiny", "bert-tiny"])
def test_fast_path_records_what_the_reference_recorder_does(workload: str) -> None:
    """Names, shapes, dtypes and FLOPs of every op of a training step, in order — hence graph
    keys, graph hashes and the cost model's input — and the HBM ledger are the same with the
    fast path (Recorder shortcut, FLOP cache, results rebuilt from templates: the third step
    builds every op from the cache) as with the reference path."""
    from emulator.capture.recorder import CapturedGraph
    from emulator.runtime.compile_cache import graph_hash

    ref_keys, ref_memory = _train_steps(workload, 2, fast=False)
    keys, memory = _train_steps(workload, 3, fast=True)
    assert keys[:2] == ref_keys
    assert keys[2] == keys[1]  # the steady-state step, all from the caches
    assert memory[:2] == ref_memory and memory[2] == memory[1]
    assert len(ref_keys[1]) > 500 and sum(op[3] for op in ref_keys[1]) > 0
    for ref, key in zip(ref_keys, keys, strict=False):
        ref_ops, ops = CapturedGraph(list(ref)).ops(), CapturedGraph(list(key)).ops()
        assert ops == ref_ops and graph_hash(ops) == graph_hash(ref_ops)


def _meta_results(fast: bool) -> list[tuple]:
    """Metadata of the results of ops with every kind of result, called twice each (the second
    call of a signature is rebuilt from the cache on the fast path)."""
    recorder = Recorder()
    ledger = MemoryLedger(core=0, device=0, local_core=0, capacity=2**50, runtime_memory=0, code_overhead=0)
    dt.hooks.on_op, dt.hooks.on_alloc = recorder.on_op, ledger.on_alloc
    dt.hooks.meta_mode, dt.hooks.fast_path = True, fast
    _push_mode(dt.DeviceMode())
    seen: list[tuple] = []
    try:
        x = torch.empty(4, 6, 8, device="meta").to(dt.DEVICE)
        w = torch.empty(8, dtype=torch.float32, device="meta").to(dt.DEVICE)
        img = torch.empty(2, 3, 4, 4, device="meta").to(dt.DEVICE)
        buf = torch.empty(4, device=dt.DEVICE)
        for step in range(2):  # float arguments differ between the two calls
            results = {
                "div_float": x / (1.0 + step),
                "interpolate": torch.nn.functional.interpolate(img, scale_factor=2.0 + step),
                "foreach": torch._foreach_mul([x, w], [0.5 + step, 2.0]),
                "arange_out": torch.arange(0.0, 4.0 + step, out=buf),
                # results of results: lazily made on the fast path's second call, then viewed
                # from the cache (transpose), the plain way (a view not seen before) and in place
                "of_result": (y := x * 3, y.transpose(0, 1), y.view(*([4 * 6 * 8] if step else [4, 48]))[1:]),
                "in_place_of_result": (z := x - 1).add_(y),
                "add": x + 1,
                "add_int_vs_float": torch.ones(3, dtype=torch.int64, device=dt.DEVICE) * 2,
                "mul_float": torch.ones(3, dtype=torch.int64, device=dt.DEVICE) * 2.0,
                "transpose": x.transpose(0, 2),
                "slice": x[1:, ::2],
                "expand": w.expand(5, 8),
                "split": x.split(2, dim=1),
                "unbind": x.unbind(0),
                "layer_norm": torch.nn.functional.layer_norm(x, (8,), w, w),
                "cat": torch.cat([x, x], dim=0),
                "permute_contig": x.permute(2, 0, 1).contiguous(),
                "view_dtype": x.view(torch.int32),
                "in_place": x.mul_(2),
                "max": x.max(dim=1),
                "out": torch.add(x, x, out=torch.empty(4, 6, 8, device=dt.DEVICE)),
            }
            seen.append(("ledger before use", ledger.usage().tensors, ledger.peak))
            for name, out in results.items():
                outs = out if isinstance(out, (tuple, list)) else (out,)
                for o in outs:
                    inner = dt.unwrap(o)
                    seen.append(
                        (
                            name,
                            type(o).__name__,
                            tuple(o.shape),
                            o.stride(),
                            o.storage_offset(),
                            o.dtype,
                            inner.stride(),
                            inner.untyped_storage().nbytes(),
                            inner.untyped_storage()._cdata == dt.unwrap(x).untyped_storage()._cdata,
                            o is x,
                        )
                    )
            seen.append(("ledger", ledger.usage().tensors, ledger.peak, recorder.take_graph().key))
            del results, outs, o, inner, y, z
    finally:
        _pop_mode()
        dt.hooks.on_op = dt.hooks.on_alloc = None
        dt.hooks.meta_mode, dt.hooks.fast_path = False, True
    return seen


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
def test_meta_results_rebuilt_from_the_cache_are_the_kernels() -> None:
    """Shape, stride, offset, dtype, storage size and aliasing (views share the input's storage,
    in-place and out= ops return the argument itself) of results built from the cache equal the
    meta kernels' own."""
    assert _meta_results(fast=True) == _meta_results(fast=False)


def test_a_recorder_subclass_or_other_hook_gets_the_general_call(device) -> None:
    class Counting(Recorder):
        calls = 0

        def on_op(self, *args: object) -> None:
            Counting.calls += 1
            super().on_op(*args)  # type: ignore[arg-type]

    counting = Counting()
    dt.hooks.on_op = counting.on_op
    _ = torch.ones(2, device=dt.DEVICE) + 1
    assert Counting.calls == 2 and [op.name for op in counting.take()] == ["emulator.host_to_device", "aten.add"]


def test_recorder_loses_no_op_taken_while_another_thread_records() -> None:
    import threading

    recorder = Recorder()
    op = ("aten.add", (), (), 0)

    def record() -> None:
        for _ in range(20000):
            recorder.record(op)

    threads = [threading.Thread(target=record) for _ in range(2)]
    for t in threads:
        t.start()
    taken = 0
    while any(t.is_alive() for t in threads):
        taken += len(recorder.take_graph())
    for t in threads:
        t.join()
    assert taken + len(recorder.take_graph()) == 40000
