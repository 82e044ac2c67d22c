"""The emulated device inside a training process: capture, compile, cost, execute, report.

``mark_step()`` ends the step graph recorded since the previous one. A graph seen for the first
time is "compiled" (simulated compile time, unless the persistent cache has it) and loaded as a
model; then the cost model turns its ops into NeuronCore time, the execution is reported to the
daemon, and the process blocks until the simulated device time has passed — as it would wait
on a real device. NaN/Inf produced by the step (seen in the real values) make the execution
``completed_with_num_err``, as the Neuron runtime reports numerical errors.
"""

from __future__ import annotations

import atexit
import contextlib
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, cast

import torch

from emulator.capture import native
from emulator.capture import tensor as device_tensor
from emulator.capture.ops import CollectiveRecord
from emulator.capture.recorder import Recorder
from emulator.costmodel import (
    CostOptions,
    GraphCost,
    GroupCollectiveCost,
    compile_cost,
    cost_graph,
    cost_group_collective,
    links_for,
    options_from_env,
    runtime_model_code_overhead_bytes,
)
from emulator.hardware import RUNTIME as RUNTIME_SPEC
from emulator.hardware import get_instance_type
from emulator.profile.device import CoreIdentity, DeviceCapture, Ran, executor_trace_info
from emulator.profile.session import Done, Profiler
from emulator.runtime.attach import RuntimeSession
from emulator.runtime.collectives import collective_error, collective_timeout
from emulator.runtime.compile_cache import CompileCache, LoadedModel, cache_settings, graph_hash
from emulator.runtime.errors import NeuronRuntimeError
from emulator.runtime.execution import Collective, CoreMemory, Execution, Holding, Link, MemoryReport, Work, execution
from emulator.runtime.faults import NO_FAULTS, CoreFaults
from emulator.runtime.memory import MemoryLedger
from emulator.runtime.placement import Store, global_core, job_rank, node_of, this_process
from neurontools.sources.daemon_client import DaemonError, DaemonUnavailable


@dataclass(frozen=True)
class StepResult:
    """What the last ``mark_step()`` did, for progress displays (all simulated except wall)."""

    step: int
    device_seconds: float
    compile_seconds: float
    wall_seconds: float
    flops: int
    compiled: bool
    cache_hit: bool
    outcome: str
    ops: int
    engines: dict[str, float] = field(default_factory=dict)


@dataclass
class StepTotals:
    """Sums over the process's executions (torch_xla's metrics report reads them)."""

    executions: int = 0
    device_seconds: float = 0.0
    compiles: int = 0
    compile_seconds: float = 0.0

    def add(self, result: StepResult) -> None:
        self.executions += 1
        self.device_seconds += result.device_seconds
        if result.compiled:
            self.compiles += 1
            self.compile_seconds += result.compile_seconds


class DeviceRuntime:
    def __init__(self, session: RuntimeSession, env: Mapping[str, str], *, auto_cast: str | None = None) -> None:
        self.session = session
        self.env = dict(env)
        self.core = session.neuroncores[0]  # lazy:0 is the first NeuronCore the process owns
        inventory = session.client.get("/inventory")
        itype = get_instance_type(inventory["instance"]["instance_type"])
        # the core as the collective model numbers the job's cores (docs/collectives.md)
        self.global_core = global_core(node_of(job_rank(env), env), self.core, itype.core_count)
        self.instance_type = itype
        self.options: CostOptions = options_from_env(env, auto_cast)
        self.links = links_for(itype)
        self.timeout = float(env.get("NEURON_RT_EXEC_TIMEOUT", "") or RUNTIME_SPEC.exec_timeout.value)
        self.recorder = Recorder()
        self.ledger = MemoryLedger(
            core=self.core,
            device=itype.layout.device_of(self.core),
            local_core=itype.layout.local_core(self.core),
            capacity=itype.core_memory_bytes,
            runtime_memory=int(RUNTIME_SPEC.device_memory.base),
            code_overhead=runtime_model_code_overhead_bytes(itype.chip.core),
        )
        cache_dir, flags = cache_settings(env)
        self.cache = CompileCache(cache_dir, flags)
        self._collectives: list[CollectiveRecord] = []
        self._graph_costs: dict[str, GraphCost] = {}
        self._digests: dict[tuple, str] = {}  # captured graph key -> stable graph hash
        self._step = 0
        self.totals = StepTotals()
        self._last_mark = time.monotonic()
        self.last: StepResult | None = None
        self._lock = threading.Lock()
        self.native: Any = None  # the native device backend, once install() started it
        self.faults: CoreFaults = NO_FAULTS  # the core's faults, as the daemon last answered (docs/faults.md)
        self._failure: NeuronRuntimeError | None = None  # a hardware error ended this runtime
        # neuron_parallel_compile's first pass: graphs are extracted to the cache, not executed
        self.extract_only = self.env.get("NEURON_EXTRACT_GRAPHS_ONLY", "").strip() not in ("", "0")
        self._extracted: set[str] = set()
        self.profile = self._profiling(inventory)

    def _profiling(self, inventory: Mapping[str, Any]) -> DeviceCapture:
        """``NEURON_RT_INSPECT_*`` and daemon profile requests (docs/profiling.md); a bad setting
        is the runtime's one-line refusal to start."""
        rank = job_rank(self.env)
        world = self.env.get("WORLD_SIZE", "").strip()
        who = CoreIdentity(self.core, rank, int(world) if world.isdigit() else 1, node_of(rank, self.env))
        try:
            profiler = Profiler(self.env, lambda: executor_trace_info(inventory, who))
        except ValueError as exc:
            raise NeuronRuntimeError("NRT_INVALID", str(exc)) from None
        return DeviceCapture(profiler, who, self.options, self._profile_done)

    def _profile_done(self, done: Done) -> None:
        """A daemon profile request is finished: say so (a restarted daemon may have forgotten it: 404)."""
        rid, dirs, error = done
        with contextlib.suppress(DaemonUnavailable, DaemonError):
            body = {"id": rid, "dirs": dirs, "error": error}
            self.session.client.post(f"/processes/{self.session.owner_pid}/profile/done", body)

    # -- lifecycle ---------------------------------------------------------------------------
    def install(self) -> None:
        device_tensor.hooks.on_op = self.recorder.on_op
        device_tensor.hooks.on_alloc = self.ledger.on_alloc
        device_tensor.hooks.downcast = framework_downcast(self.env)
        # Real-math work runs on the native backend (device xla). torch_xla's BF16 switches cast
        # tensors as they land on the device, which only the Python layer does (docs/capture.md).
        if not device_tensor.hooks.downcast:
            self.native = native.start(self.ledger.out_of_memory)
            if self.native is not None:
                self.ledger.use_native(self.native, native.parameters)
        self.session.set_resume(self.resume_state)
        self.session.on_register(self._register_again)
        atexit.register(self.profile.close)  # before the session's own exit handler releases the cores

    # -- a restarted daemon (docs/lifecycle.md) ----------------------------------------------
    def resume_state(self) -> dict[str, list[dict[str, Any]]]:
        """What this process holds on its core, for registering again with a restarted daemon."""
        usage = self.ledger.usage()
        models = [
            {"core": self.core, "model_id": m.model_id, "uuid": m.uuid, "name": m.name, "code_bytes": m.code_bytes}
            for m in self.cache.loaded_models()
        ]
        return {"cores": [{"core": self.core, "memory": usage.to_dict(), "peak": self.ledger.peak}], "models": models}

    def _register_again(self) -> None:
        """A new daemon's counters start from zero: so do the compile-cache counts it is sent."""
        self.cache.counts.registered()

    # -- collectives -------------------------------------------------------------------------
    def record_collective(
        self, kind: str, nbytes: int, store: Store, ranks: Sequence[int], concurrent: Sequence[Sequence[int]] = ()
    ) -> None:
        """A collective of the global ``ranks`` done for this step: costed at ``mark_step`` on the
        ranks' NeuronCores, which ``store`` (the job's) tells (emulator/runtime/placement.py);
        ``concurrent``: the other groups doing the same collective at the same time."""
        after_op = self._pending_ops()  # where it sits in the step (a count: cheap, so always known)
        placement = this_process()
        placement.publish(store, job_rank(), self.global_core)
        cores = placement.cores(store, ranks)
        if len(cores) > 1:  # list.append is atomic; mark_step swaps the list
            groups = placement.groups(store, concurrent)
            self._collectives.append(CollectiveRecord(kind, nbytes, cores, groups, tuple(ranks), after_op))

    def _pending_ops(self) -> int:
        """Ops captured so far in this step, by both device layers."""
        return self.recorder.pending() + (native.pending_ops() if self.native is not None else 0)

    def all_reduce_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Sum gradients across ranks (real gloo all-reduce of the values) and record its cost."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return
        world = dist.get_world_size()
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        total = 0
        for grad in grads:
            inner = native.host_view(grad) if native.is_device(grad) else device_tensor.unwrap(grad)
            total += inner.numel() * inner.element_size()
            if not inner.is_meta:
                try:
                    dist.all_reduce(inner)
                except RuntimeError as exc:  # a peer rank is gone or stuck (docs/lifecycle.md)
                    raise collective_error(
                        exc, "the gradient all-reduce", rank=dist.get_rank(), timeout=collective_timeout(self.env)
                    ) from None
                inner.div_(world)
        self.record_collective("all_reduce", total, dist.distributed_c10d._get_default_store(), range(world))

    def _cost(self, record: CollectiveRecord) -> tuple[CollectiveRecord, GroupCollectiveCost]:
        """A collective of this step on its group's cores, costed by the one topology-aware model
        (docs/collectives.md)."""
        cost = cost_group_collective(
            record.kind, record.nbytes, record.cores, self.instance_type, record.concurrent, links=self.links
        )
        return record, cost

    @staticmethod
    def _costed(record: CollectiveRecord, cost: GroupCollectiveCost) -> Collective:
        """The collective as reported: its seconds and the bytes this core sent on each link type."""
        return Collective(
            record.kind,
            record.nbytes,
            len(record.cores),
            cost.nodes,
            seconds=cost.seconds,
            link_bytes={cast(Link, link): n for link, n in cost.link_bytes.items()},
        )

    # -- execution ---------------------------------------------------------------------------
    def mark_step(self) -> StepResult | None:
        self.session.raise_if_failed()  # e.g. a restarted daemon gave one of our cores away
        if self._failure is not None:
            raise self._failure
        with self._lock:
            return self._mark_step()

    def _mark_step(self) -> StepResult | None:
        called = time.monotonic()
        captured = self._take_graph()
        collectives, self._collectives = self._collectives, []
        if not len(captured) and not collectives:
            return None
        self._step += 1
        digest = self._digests.get(captured.key)
        ops = None
        if digest is None:  # a graph not seen in this process: its records and stable hash, once
            ops = captured.ops()
            digest = self._digests[captured.key] = graph_hash(ops)
        if self.extract_only:  # neuron_parallel_compile's first pass: keep the graph, run nothing
            self._extract(digest, ops if ops is not None else captured.ops())
            return None
        self.profile.step_begins(self._step)
        model, compile_seconds, cache_hit = self._model(digest, ops, captured)
        graph = self._graph_costs.get(digest)
        if graph is None:  # the same graph always costs the same: compute it once per graph
            ops = ops if ops is not None else captured.ops()
            graph = self._graph_costs[digest] = cost_graph(ops, self.options, self.instance_type.chip.core)
        faults = self.faults  # applied from the execution after the answer that carried them
        costs = [self._cost(c) for c in collectives]
        start = time.monotonic()
        ex = execution(
            self.core,
            start,
            self._work(graph, costs, host_seconds=start - called),
            self._holding(model),
            faults,
            timeout=self.timeout,
            numerical_error=self._produced_non_finite,
        )
        self._post(ex)
        if self.profile.active:  # written while the process waits for the simulated device time
            records = captured.ops if ops is None else (lambda: ops)
            ran = Ran(self._step, digest, model.name, model.model_id, called, graph, records, costs, faults.slow_factor)
            self.profile.executed(ex, ran)
        else:
            self.profile.count(digest)
        failure = faults.hardware_failure(self.core, f"execution of model {model.model_id}")
        if failure is not None:
            self._fail(failure)
        _sleep_until(start + min(ex.device_seconds, self.timeout))
        return self._done(ex, compile_seconds, cache_hit, len(captured), model)

    def _model(self, digest: str, ops: list | None, captured: Any) -> tuple[LoadedModel, float, bool]:
        """The graph's loaded model: in memory already (a JIT cache hit), else compiled or taken
        from the persistent cache, and loaded; with the compile seconds and whether it was a hit."""
        model = self.cache.loaded(digest)
        if model is not None:
            self.cache.counts.count(hit=True)  # in-memory JIT cache
            return model, 0.0, True
        return self._compile_and_load(digest, ops if ops is not None else captured.ops())

    def _work(
        self, graph: GraphCost, costs: list[tuple[CollectiveRecord, GroupCollectiveCost]], host_seconds: float
    ) -> Work:
        """The step's modelled cost on a healthy core: the graph's, and its collectives' (each
        also reported with its own modelled time: neuron_collective_seconds_total)."""
        costed = tuple(self._costed(record, cost) for record, cost in costs)
        return Work(
            device_seconds=graph.device_seconds + sum(c.seconds for c in costed),
            flops=int(graph.flops),
            engines=graph.busy,
            collectives=costed,
            host_seconds=host_seconds,
        )

    def _done(self, ex: Execution, compile_seconds: float, cache_hit: bool, ops: int, model: LoadedModel) -> StepResult:
        """The step's result for progress displays; raises the runtime's timeout error."""
        now = time.monotonic()
        result = StepResult(
            step=self._step,
            device_seconds=ex.device_seconds,
            compile_seconds=compile_seconds,
            wall_seconds=now - self._last_mark,
            flops=ex.flops,
            compiled=compile_seconds > 0,
            cache_hit=cache_hit,
            outcome=ex.outcome,
            ops=ops,
            engines={str(e): s for e, s in ex.engines.items()},
        )
        begin, self._last_mark = self._last_mark, now
        self.profile.step_ends(self._step, begin, now)
        self.last = result
        self.totals.add(result)
        if ex.outcome == "timed_out":
            raise NeuronRuntimeError(
                "NRT_TIMEOUT",
                f"execution of model {model.model_id} did not complete within NEURON_RT_EXEC_TIMEOUT="
                f"{self.timeout:g} s (it needs {ex.device_seconds:.3f} s of device time)",
            )
        return result

    def _extract(self, digest: str, ops: list) -> None:
        if digest in self._extracted or self.cache.on_disk(digest):
            return
        self._extracted.add(digest)
        cost = compile_cost(ops)
        where = self.cache.extract(digest, ops, cost.seconds, cost.model_code_bytes)
        _log(
            f"Extracting graphs ({where}) for ahead-of-time parallel compilation. No compilation was done."
            if where is not None
            else "Graph extraction needs the compile cache (NEURON_CC_FLAGS has --no_cache): nothing kept"
        )

    def _fail(self, failure: NeuronRuntimeError) -> None:
        """An uncorrectable ECC error ended this execution at once (reported: error_summary
        hardware): log the runtime's line, and raise now and at every later step."""
        print(f"ERROR  NRT:nrt_execute {failure}", file=sys.stderr, flush=True)
        self._failure = failure
        raise failure

    def _take_graph(self) -> Any:
        """The step's ops, from the device layer that recorded them (both, in the rare process
        that uses the two)."""
        python = self.recorder.take_graph()
        native_graph = native.take_graph() if self.native is not None else None
        if native_graph is None or not len(native_graph):
            return python
        if not len(python):
            return native_graph
        return _Graphs(python, native_graph)

    def _compile_and_load(self, digest: str, ops: list) -> tuple[LoadedModel, float, bool]:
        began = time.monotonic()
        cost = compile_cost(ops)
        on_disk = self.cache.on_disk(digest)
        seconds = 0.0
        if on_disk:
            module = self.cache.module_dir(digest)
            _log(f"Using a cached neff at {module}/model.neff. Exiting with a successfully compiled graph.")
        else:
            seconds = cost.seconds
            _log(f"Compiling graph {digest[:20]} ({len(ops)} ops) - simulated compile time {seconds:.2f} s")
            time.sleep(seconds)
            self.cache.store(digest, ops, cost.model_code_bytes)
            _log("Compiler status PASS")
        self.ledger.load_code(cost.model_code_bytes)
        model = self.cache.load(digest, ops, cost.model_code_bytes)
        self.cache.counts.count(hit=on_disk)
        self.profile.compiled(digest, len(ops), began, seconds, on_disk)
        return model, seconds, on_disk

    def _produced_non_finite(self) -> bool:
        """NaN/Inf in the floating-point values the device holds (real-math work only)."""
        if self.native is not None and self.native.non_finite():
            return True
        for wrapper in self.ledger.live_wrappers():
            inner = device_tensor.made_inner(wrapper)  # None: a lazy meta tensor, no values
            if inner is None or inner.is_meta or not inner.is_floating_point() or inner.numel() == 0:
                continue
            if not bool(torch.isfinite(inner).all()):
                return True
        return False

    def _holding(self, model: LoadedModel) -> Holding:
        """What the process holds when the execution starts: its model, cache counts, memory."""
        return Holding(
            model=model.ref(),
            compile_cache=self.cache.counts.reported(),
            memory=MemoryReport(core=CoreMemory(**self.ledger.usage().to_dict()), peak=self.ledger.peak),
        )

    def _post(self, ex: Execution) -> None:
        """Report one execution; keep the core's faults the daemon answers (docs/faults.md). The
        compile-cache counts are read as it is sent: a daemon that registered the process again
        meanwhile counts from zero (docs/lifecycle.md)."""
        body = {**ex.to_wire(), "compile_cache": asdict(self.cache.counts.reported())}
        try:  # the daemon being away does not stop training (docs/lifecycle.md)
            answer = self.session.client.post(f"/processes/{self.session.owner_pid}/executions", body)
        except DaemonUnavailable:
            self.session.suspect()
            return
        except DaemonError as exc:
            if exc.status == 404:  # a restarted daemon that does not know us (yet)
                self.session.suspect()
            return
        self.faults = CoreFaults.from_answer(answer, self.core)
        self.profile.profiler.on_answer(answer)  # a capture neuron-profile asked for (docs/profiling.md)


class _Graphs:
    """A step recorded partly by each device layer: one graph, the Python layer's ops first."""

    def __init__(self, *parts: Any) -> None:
        self.parts = parts
        self.key = tuple(p.key for p in parts)

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    def ops(self) -> list:
        return [op for p in self.parts for op in p.ops()]


def framework_downcast(env: Mapping[str, str]) -> dict[torch.dtype, torch.dtype]:
    """torch_xla's framework-level BF16 switches (docs/reference/trn1-runtime.md §Data types and BF16 switches): with
    ``XLA_USE_BF16=1`` float and double tensors are BF16 on the device; with
    ``XLA_DOWNCAST_BF16=1`` float is BF16 and double is FP32. The real values are cast too."""
    if env.get("XLA_USE_BF16", "").strip() == "1":
        return {torch.float32: torch.bfloat16, torch.float64: torch.bfloat16}
    if env.get("XLA_DOWNCAST_BF16", "").strip() == "1":
        return {torch.float32: torch.bfloat16, torch.float64: torch.float32}
    return {}


def _sleep_until(deadline: float) -> None:
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        time.sleep(remaining)


def _log(message: str) -> None:
    print(f"INFO ||NEURON_CC_WRAPPER||: {message}", file=sys.stderr, flush=True)
