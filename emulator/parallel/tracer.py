"""Trace the programs of a model-scale parallel job once: one capture per distinct program.

In an SPMD job every rank of a pipeline stage runs the same program: the tensor-parallel ranks
hold shards of identical shapes, the data-parallel replicas identical copies. On a real Trn1 they
trace the same graphs, get the same hashes and run the same NEFFs from the persistent cache
(docs/parallel.md). So the emulator builds each *stage* once on ``meta`` (real model code, real
autograd, real optimizer; shapes only, no values), captures its step graphs exactly as
``emulator.xla`` captures a training script's, costs them with the cost model and measures its
HBM ledger. The ranks then replay those graphs (``emulator.parallel.replay``): a model-scale step
has no data-dependent control flow, so every step after the first traces to the same graphs —
replaying them is the same work the device would be given.

Graphs of one stage (what ``mark_step`` would cut in a torch_xla training loop):

- pp = 1: ``micro_step`` (forward + backward of the first micro-batch: gradients are created),
  ``micro_step_accumulate`` (later micro-batches: gradients are added), ``optimizer`` (the
  data-parallel gradient reduction, global-norm clipping and AdamW), ``optimizer_first`` (the same
  on step 1, which also creates the optimizer state).
- pp > 1: ``forward``, ``backward``, ``backward_accumulate`` per micro-batch (the activation is
  sent between them), and the two optimizer graphs.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from emulator.capture import tensor as device_tensor
from emulator.capture.dtypes import TORCH_DTYPES
from emulator.capture.recorder import Recorder
from emulator.costmodel import CostOptions, compile_cost, cost_graph, runtime_model_code_overhead_bytes
from emulator.hardware.neuroncore_v2 import RUNTIME, NeuronCoreV2Spec
from emulator.parallel import comm
from emulator.parallel.comm import CollectiveCall, RecordingCommunicator
from emulator.parallel.ranks import ParallelState
from emulator.profile.graphs import graph_schedule
from emulator.runtime.compile_cache import graph_hash
from emulator.runtime.memory import MemoryLedger
from neurontools.contract.profile import CollectiveCall as ProfileCall
from neurontools.contract.profile import GraphSchedule


@dataclass(frozen=True)
class TracedGraph:
    """One step graph of a stage, costed for one NeuronCore."""

    name: str
    graph_hash: str
    ops: int  # captured ops
    device_ops: int  # ops that emit instructions
    compute_seconds: float  # the cost model's device time of the graph (collectives not included)
    flops: int
    engines: dict[str, float]
    hbm_bytes: int
    compile_seconds: float
    code_bytes: int
    collectives: tuple[CollectiveCall, ...]
    # the profile's schedule file of the graph (emulator/profile/graphs.py): its ops where the
    # cost model put them and its collectives at their places
    schedule: GraphSchedule | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class StageMemory:
    """Bytes one NeuronCore of the stage holds (its shard), by what they are."""

    weights: int  # parameters (neuron-monitor "constants")
    gradients: int
    optimizer: int  # optimizer state (AdamW moments, FP32 master weights; 1/dp of it with ZeRO-1)
    activations: int  # kept for the backward pass, per micro-batch in flight
    transient: int  # extra peak inside one micro-step (backward's temporaries)
    model_code: int  # NEFFs of the stage's graphs
    code_overhead: int  # the runtime's per-core micro-code
    runtime: int
    capacity: int

    def peak(self, in_flight: int) -> int:
        """HBM high-water mark with ``in_flight`` micro-batches' activations held."""
        return (
            self.weights
            + self.gradients
            + self.optimizer
            + self.activations * in_flight
            + self.transient
            + self.model_code
            + self.code_overhead
            + self.runtime
        )


@dataclass(frozen=True)
class StageProgram:
    stage: int
    graphs: dict[str, TracedGraph]
    memory: StageMemory
    send_bytes: int  # activation sent to the next stage per micro-batch (its gradient comes back)
    parameters: int  # parameters held by one core of the stage
    trace_seconds: float = 0.0


@dataclass
class _Capture:
    options: CostOptions
    core: NeuronCoreV2Spec
    recorder: Recorder = field(default_factory=Recorder)
    graphs: dict[str, TracedGraph] = field(default_factory=dict)

    def cut(self, name: str, comm_: RecordingCommunicator) -> TracedGraph:
        """End the graph recorded so far (what mark_step does) and cost it."""
        captured = self.recorder.take_graph()
        ops = captured.ops()
        cost = cost_graph(ops, self.options, self.core)
        compiled = compile_cost(ops)
        digest = graph_hash(ops)
        calls = tuple(comm_.take())
        graph = TracedGraph(
            name=name,
            graph_hash=digest,
            ops=len(ops),
            device_ops=cost.device_op_count,
            compute_seconds=cost.device_seconds,
            flops=int(cost.flops),
            engines=dict(cost.busy),
            hbm_bytes=int(cost.hbm_bytes),
            compile_seconds=compiled.seconds,
            code_bytes=compiled.model_code_bytes,
            collectives=calls,
            schedule=graph_schedule(name, digest, ops, cost, [_call(c) for c in calls], self.options),
        )
        self.graphs[name] = graph
        return graph

    def discard(self, comm_: RecordingCommunicator) -> None:
        self.recorder.take_graph()
        comm_.take()


def _call(call: CollectiveCall) -> ProfileCall:
    """A traced collective as the profile's schedule file names it (at its place in the graph)."""
    return ProfileCall(
        after_op=max(0, call.after_op), kind=call.kind, bytes=call.nbytes, group=call.group, wait_op=call.wait_op
    )


BuildStage = Callable[[], nn.Module]
StageInputs = Callable[[nn.Module], Sequence[torch.Tensor]]


def trace_stage(
    build: BuildStage,
    inputs: StageInputs,
    *,
    state: ParallelState,
    grad_accum: int,
    zero1: bool,
    dtype: str,
    options: CostOptions,
    core: NeuronCoreV2Spec,
    capacity: int,
    lr: float = 1e-4,
    master_weights: bool = False,
) -> StageProgram:
    """Build one stage on the device (meta) and capture its graphs; raises the runtime's
    ``NRT_RESOURCE`` error (:class:`NeuronRuntimeError`) when one micro-step does not fit.
    ``master_weights``: AdamW steps FP32 copies of the parameters (sharded with ``zero1``)."""
    import time

    started = time.perf_counter()
    capture = _Capture(options, core)
    ledger = MemoryLedger(
        core=0,
        device=0,
        local_core=0,
        capacity=capacity,
        runtime_memory=int(RUNTIME.device_memory.base),
        code_overhead=runtime_model_code_overhead_bytes(core),
    )
    recording = RecordingCommunicator(state, position=capture.recorder.pending)
    hooks = device_tensor.hooks
    saved = (hooks.on_op, hooks.on_alloc, hooks.meta_mode, hooks.downcast, comm.communicator())
    hooks.on_op, hooks.on_alloc, hooks.meta_mode, hooks.downcast = capture.recorder.on_op, ledger.on_alloc, True, {}
    comm.set_communicator(recording)
    try:
        with device_tensor.DeviceMode():
            program = _trace(
                build, inputs, capture, ledger, recording, state, grad_accum, zero1, dtype, lr, master_weights
            )
    finally:
        hooks.on_op, hooks.on_alloc, hooks.meta_mode, hooks.downcast = saved[:4]
        comm.set_communicator(saved[4])
        gc.collect()
    code = sum(g.code_bytes for g in program.graphs.values())
    memory = StageMemory(**{**program.memory.__dict__, "model_code": code})
    return StageProgram(
        program.stage, program.graphs, memory, program.send_bytes, program.parameters, time.perf_counter() - started
    )


def _to_device(t: torch.Tensor) -> torch.Tensor:
    out = t.to(device_tensor.DEVICE)
    if t.requires_grad:
        out = out.detach().requires_grad_()
    return out


def _allocated(ledger: MemoryLedger) -> int:
    gc.collect()  # storages are released when their last device tensor goes away
    usage = ledger.usage()
    return usage.constants + usage.tensors


@dataclass
class _StageRun:
    """One stage's module on the device and what its steps record into."""

    module: nn.Module
    capture: _Capture
    ledger: MemoryLedger
    recording: RecordingCommunicator
    state: ParallelState
    dtype: str
    master_weights: bool = False  # mixed precision: FP32 master weights and moments, FP32 gradient accumulation
    send_bytes: int = 0  # the activation sent to the next stage per micro-batch
    accumulated: dict[int, torch.Tensor] = field(default_factory=dict)  # id(parameter) -> its FP32 gradient

    @property
    def params(self) -> list[nn.Parameter]:
        return [p for p in self.module.parameters() if p.requires_grad]

    def gradient(self, p: nn.Parameter) -> torch.Tensor | None:
        """The parameter's gradient as the optimizer step reduces it (its FP32 buffer, if any)."""
        return self.accumulated.get(id(p), p.grad)

    def _accumulate(self) -> None:
        """NxD's FP32 gradient accumulation: each backward's gradient, in the training dtype, is
        added into the parameter's FP32 buffer (made from the first) and freed."""
        with torch.no_grad():
            for p in self.params:
                if p.grad is None:
                    continue
                if id(p) in self.accumulated:
                    self.accumulated[id(p)].add_(p.grad)
                else:
                    self.accumulated[id(p)] = p.grad.to(torch.float32)
                p.grad = None

    def micro_step(self, inputs: StageInputs, first: bool) -> tuple[int, int]:
        """One micro-batch; returns (activation bytes kept for backward, transient peak above them)."""
        capture, recording, state = self.capture, self.recording, self.state
        pipelined = state.pp > 1
        # float inputs (images, a received activation) arrive in the training dtype, as the
        # workloads' loop casts them (emulator/workloads/runner.py)
        dtype = TORCH_DTYPES[self.dtype]
        batch = [_to_device(t.to(dtype) if t.is_floating_point() else t) for t in inputs(self.module)]
        if not state.first_stage:
            capture.discard(recording)  # the received activation arrives by the pipeline send
        base = _allocated(self.ledger)
        self.ledger.peak = 0
        out = self.module(*batch)
        if pipelined:
            if not state.last_stage:
                self.send_bytes = out.numel() * out.element_size()
            capture.cut("forward", recording)
        kept = _allocated(self.ledger) - base
        if state.last_stage:
            out.backward()
        else:
            out.backward(torch.empty_like(out))
        if self.master_weights:
            self._accumulate()
        name = "micro_step" if first else "micro_step_accumulate"
        if pipelined:
            name = "backward" if first else "backward_accumulate"
        capture.cut(name, recording)
        peak = max(0, self.ledger.peak - self.ledger.fixed_bytes() - base - kept)
        del out, batch
        return kept, peak

    def optimizer_step(self, optimizer: torch.optim.Optimizer, name: str, zero1: bool, grad_bytes: int) -> None:
        """The data-parallel reduction, global-norm clipping and AdamW, cut as graph ``name``.
        With master weights the optimizer steps FP32 copies (:func:`_master`) with the FP32
        gradients and the updated copies are cast back into the training dtype after (NxD's mixed
        precision, docs/parallel.md §HBM per core)."""
        params, state, master = self.params, self.state, self.master_weights
        grad_dtype = torch.float32 if master else params[0].dtype
        if state.dp > 1:
            numel = grad_bytes // grad_dtype.itemsize
            if zero1:  # ZeRO-1: the bucket is padded to split evenly; each rank reduces only its 1/dp
                flat = params[0].new_empty(math.ceil(numel / state.dp) * state.dp, dtype=grad_dtype)  # no op
                comm.reduce_scatter(flat, 0, "dp")
            else:
                flat = params[0].new_empty(numel, dtype=grad_dtype)
                comm.all_reduce(flat, "dp")
            del flat
        stepped = optimizer.param_groups[0]["params"]
        if state.tp > 1:  # the global gradient norm sums the shards' squared norms (Megatron)
            comm.all_reduce(params[0].new_empty(1, dtype=torch.float32), "tp")
        torch.nn.utils.clip_grad_norm_(stepped if zero1 or master else params, 1.0)
        optimizer.step()
        if master:
            with torch.no_grad():
                if zero1:  # each rank's updated shard, cast down for the gather
                    for m in stepped:
                        m.to(params[0].dtype)
                else:
                    for p, m in zip(params, stepped, strict=True):
                        p.copy_(m)
        if zero1 and state.dp > 1:  # the updated shards are gathered back into every replica
            shard = math.ceil(grad_bytes / grad_dtype.itemsize / state.dp)  # the parameters, in the training dtype
            comm.all_gather(params[0].new_empty(shard), 0, "dp")
        self.capture.cut(name, self.recording)


def _trace(
    build: BuildStage,
    inputs: StageInputs,
    capture: _Capture,
    ledger: MemoryLedger,
    recording: RecordingCommunicator,
    state: ParallelState,
    grad_accum: int,
    zero1: bool,
    dtype: str,
    lr: float,
    master_weights: bool = False,
) -> StageProgram:
    with torch.device("meta"):
        module = build()
    module.to(TORCH_DTYPES[dtype])
    module.to(device_tensor.DEVICE)  # the shard's weights are allocated on the core here
    capture.discard(recording)  # loading weights is not a step
    weights = _allocated(ledger)
    run = _StageRun(module, capture, ledger, recording, state, dtype, master_weights=master_weights)
    params = run.params

    activations, transient = run.micro_step(inputs, first=True)
    gradients = _allocated(ledger) - weights
    if grad_accum > 1:
        a2, t2 = run.micro_step(inputs, first=False)
        activations, transient = max(activations, a2), max(transient, t2)
    before_optimizer = _allocated(ledger)

    grads = [run.gradient(p) for p in params]
    grad_bytes = sum(g.numel() * g.element_size() for g in grads if g is not None)
    if zero1:
        stepped = [_shard(p, state.dp, torch.float32 if master_weights else p.dtype) for p in params]
    else:
        stepped = [_master(p, g) for p, g in zip(params, grads, strict=True)] if master_weights else params
    optimizer = torch.optim.AdamW(stepped, lr=lr, foreach=True)
    run.optimizer_step(optimizer, "optimizer_first", zero1, grad_bytes)
    optimizer_bytes = _allocated(ledger) - before_optimizer
    run.optimizer_step(optimizer, "optimizer", zero1, grad_bytes)
    memory = StageMemory(
        weights=weights,
        gradients=max(0, gradients),
        optimizer=max(0, optimizer_bytes),
        activations=max(0, activations),
        transient=transient,
        model_code=0,
        code_overhead=ledger.code_overhead,
        runtime=ledger.runtime_memory,
        capacity=ledger.capacity,
    )
    parameters = sum(p.numel() for p in params)
    return StageProgram(state.pp_rank, capture.graphs, memory, run.send_bytes, parameters)


def _shard(p: torch.Tensor, dp: int, dtype: torch.dtype) -> nn.Parameter:
    """This rank's 1/dp slice of a parameter (flat, in ``dtype``: FP32 for master weights), with
    a gradient slice, for ZeRO-1."""
    n = math.ceil(p.numel() / dp)
    shard = nn.Parameter(p.new_empty(n, dtype=dtype))
    shard.grad = p.new_empty(n, dtype=dtype)
    return shard


def _master(p: torch.Tensor, grad: torch.Tensor | None) -> nn.Parameter:
    """An FP32 copy of a parameter whose gradient is its FP32 accumulation buffer: what the
    optimizer steps with master weights (the training dtype's parameter is updated from it)."""
    master = nn.Parameter(p.detach().to(torch.float32))
    master.grad = torch.empty_like(master) if grad is None else grad
    return master
