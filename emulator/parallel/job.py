"""A model-scale parallel job, planned once: traced programs, collective costs, step timeline.

``plan_job`` traces every distinct program (one per pipeline stage: first, middle, last — middle
stages are built from the same code with the same shapes, so one capture serves them all),
maps each graph's collectives onto the concrete NeuronCores of its replica groups and costs them
on the instance's topology, adds the host share of every execution, and simulates the step
(``schedule.py``). The result drives both ``neuron-emulator run`` (ranks replay it on the
daemon's cores, ``replay.py``) and ``neuron-emulator bench`` (time fast-forwarded: the same
numbers without waiting for them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

from emulator.costmodel import CostOptions
from emulator.costmodel.topology import cost_group_collective
from emulator.hardware.instance_types import InstanceType
from emulator.parallel import host
from emulator.parallel.comm import CollectiveCall
from emulator.parallel.plan import ParallelConfig
from emulator.parallel.ranks import ParallelState, RankPlace
from emulator.parallel.schedule import GraphTime, StepTimeline, step_timeline
from emulator.parallel.tracer import StageProgram, TracedGraph, trace_stage
from emulator.runtime.errors import NeuronRuntimeError
from emulator.runtime.memory import NRT_RESOURCE_STATUS, format_bytes
from neurontools.contract.overlap import place_calls


@dataclass(frozen=True)
class CollectiveCost:
    kind: str
    group: str
    nbytes: int  # payload as nccom-test sizes it
    ranks: int
    nodes: int
    seconds: float
    link_bytes: dict[str, int]  # bytes each member core sends, by link type
    bus_bandwidth: float = 0.0  # bytes/s the ring achieved, as nccom-test reports busbw


@dataclass(frozen=True)
class StageCost:
    """A stage's graphs as one of its cores runs them."""

    program: StageProgram
    times: dict[str, GraphTime]
    collectives: dict[str, tuple[CollectiveCost, ...]]  # graph -> its collectives, costed


@dataclass
class JobPlan:
    model: str
    config: ParallelConfig
    instance: InstanceType
    dtype: str
    options: CostOptions
    parameters_total: int  # the whole model's parameters (MFU counts these)
    tokens_per_sample: int  # sequence length (tokens per sequence; patches for images)
    sample_unit: str
    stages: dict[int, StageCost]
    timeline: StepTimeline  # a steady step
    first_timeline: StepTimeline  # step 1 (creates the optimizer state)
    trace_seconds: float
    places: list[RankPlace] = field(default_factory=list)

    @property
    def step_seconds(self) -> float:
        return self.timeline.step_seconds

    @property
    def samples_per_second(self) -> float:
        return self.config.global_batch / self.step_seconds

    @property
    def compile_seconds(self) -> float:
        """Simulated neuronx-cc time of the slowest stage's graphs (each stage compiles its own)."""
        return max(sum(g.compile_seconds for g in s.program.graphs.values()) for s in self.stages.values())

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation, 6 N tokens/s over the cores' BF16 peak (docs/parallel.md)."""
        peak = self.instance.chip.core.tensor.peak("bf16").base
        tokens = self.samples_per_second * self.tokens_per_sample
        return 6 * self.parameters_total * tokens / (self.config.world * peak)

    def utilization(self, stage: int) -> float:
        """Share of a steady step a core of the stage is executing graphs (what neuron-top shows)."""
        return self.timeline.busy_seconds(stage) / self.step_seconds

    def engine_share(self, stage: int) -> dict[str, float]:
        """Per-engine busy share of a steady step on a core of the stage."""
        cost = self.stages[stage]
        totals: dict[str, float] = {}
        for slot in self.timeline.stages[stage].slots:
            for engine, seconds in cost.program.graphs[slot.graph].engines.items():
                totals[engine] = totals.get(engine, 0.0) + seconds
        return {e: s / self.step_seconds for e, s in totals.items()}

    def collective_share(self, stage: int) -> float:
        """Share of a steady step a core of the stage spends in collectives no compute hides."""
        times = self.stages[stage].times
        seconds = sum(times[slot.graph].exposed for slot in self.timeline.stages[stage].slots)
        return seconds / self.step_seconds

    def hbm_peak(self, stage: int) -> int:
        return self.stages[stage].program.memory.peak(self.timeline.stages[stage].max_in_flight)


def _stage_kind(stage: int, stages: int) -> int:
    """Which captured program serves a stage: 0 (first), 1 (a middle one), or the last."""
    if stage == 0 or stage == stages - 1:
        return stage
    return 1


ModelStages = Callable[[ParallelState], tuple[Callable, Callable, int]]


def plan_job(
    model: str,
    config: ParallelConfig,
    instance: InstanceType,
    *,
    dtype: str,
    options: CostOptions,
    stage_builder: ModelStages,
    parameters_total: int,
    tokens_per_sample: int,
    sample_unit: str = "seq",
    progress: Callable[[str], None] = lambda _: None,
) -> JobPlan:
    """Trace and cost the job; raises ``NRT_RESOURCE`` (NeuronRuntimeError) when a stage's shard
    does not fit its NeuronCore's HBM."""
    programs, trace_seconds = _trace_stages(config, instance, dtype, options, stage_builder, progress)
    places = config.grid.placements()
    stages = {s: _stage_cost(programs[s], s, config, instance, places) for s in range(config.pp)}
    timeline, first = _timelines(config, stages, _send_costs(config, instance, programs, places))
    plan = JobPlan(
        model=model,
        config=config,
        instance=instance,
        dtype=dtype,
        options=options,
        parameters_total=parameters_total,
        tokens_per_sample=tokens_per_sample,
        sample_unit=sample_unit,
        stages=stages,
        timeline=timeline,
        first_timeline=first,
        trace_seconds=trace_seconds,
        places=places,
    )
    _check_fits(plan)
    return plan


def _trace_stages(
    config: ParallelConfig,
    instance: InstanceType,
    dtype: str,
    options: CostOptions,
    stage_builder: ModelStages,
    progress: Callable[[str], None],
) -> tuple[dict[int, StageProgram], float]:
    """Every stage's program (one capture per distinct program) and the seconds tracing took."""
    programs: dict[int, StageProgram] = {}
    traced: dict[int, StageProgram] = {}
    for stage in range(config.pp):
        kind = _stage_kind(stage, config.pp)
        if kind not in traced:
            state = config.grid.state_at(pp=stage, sequence_parallel=config.sequence_parallel)
            build, inputs, _ = stage_builder(state)
            progress(f"tracing stage {stage} of {config.pp}" if config.pp > 1 else "tracing the training step")
            try:
                traced[kind] = trace_stage(
                    build,
                    inputs,
                    state=state,
                    grad_accum=config.grad_accum,
                    zero1=config.zero1,
                    master_weights=config.master_weights,
                    dtype=dtype,
                    options=options,
                    core=instance.chip.core,
                    capacity=instance.core_memory_bytes,
                )
            except NeuronRuntimeError as exc:
                if exc.status != "NRT_RESOURCE":
                    raise
                raise _stage_oom(config, instance, stage, exc.message.split(" on ND", 1)[0]) from None
        programs[stage] = traced[kind]
    return programs, sum(p.trace_seconds for p in traced.values())


def _timelines(
    config: ParallelConfig, stages: dict[int, StageCost], send: dict[int, float]
) -> tuple[StepTimeline, StepTimeline]:
    """The steady step's timeline and step 1's (which creates the optimizer state)."""
    times = {s: stages[s].times for s in stages}
    steady, first = (
        step_timeline(
            times,
            stages=config.pp,
            micro_batches=config.grad_accum,
            schedule=config.schedule,
            send_seconds=lambda s: send[s],
            first_step=first_step,
        )
        for first_step in (False, True)
    )
    return steady, first


def _check_fits(plan: JobPlan) -> None:
    """``NRT_RESOURCE`` when a stage's HBM peak, with its micro-batches in flight, exceeds the core's."""
    capacity = plan.instance.core_memory_bytes
    for stage in range(plan.config.pp):
        peak = plan.hbm_peak(stage)
        if peak > capacity:
            raise _stage_oom(
                plan.config,
                plan.instance,
                stage,
                f"Failed to allocate {format_bytes(peak - capacity)} more than the core has "
                f"(peak {format_bytes(peak)} with {plan.timeline.stages[stage].max_in_flight} micro-batches in flight)",
            )


def _stage_oom(config: ParallelConfig, instance: InstanceType, stage: int, what: str) -> NeuronRuntimeError:
    """The runtime's out-of-memory error for the first core of a stage (every core of the stage
    holds the same shard)."""
    grid = config.grid
    core = grid.place(grid.rank_of(pp=stage)).core
    device, local = instance.layout.device_of(core), instance.layout.local_core(core)
    return NeuronRuntimeError(
        "NRT_RESOURCE",
        f"{what} on ND {device}:NC {local} (NeuronCore {core}, pipeline stage {stage}): "
        f'nrt_tensor_allocate status={NRT_RESOURCE_STATUS} message="Allocation Failure" '
        f"- the shard does not fit the NeuronCore's {instance.core_memory_bytes / 2**30:g} GiB of HBM; "
        "more --tp or --pp, --zero1, --recompute, --flash-attention or a smaller --micro-batch may",
    )


def _stage_cost(
    program: StageProgram, stage: int, config: ParallelConfig, instance: InstanceType, places: list[RankPlace]
) -> StageCost:
    first = config.grid.rank_of(pp=stage)
    stage_groups = {k: config.grid.concurrent_groups(k, first) for k in ("tp", "dp")}

    @cache
    def cost(call: CollectiveCall) -> CollectiveCost:
        # a rank's global core id is its rank (rank r runs on core r % cores-per-node of node r // it)
        members = stage_groups[call.group]
        worst: CollectiveCost | None = None
        for group in members:
            spanned = len({places[r].node for r in group})
            c = cost_group_collective(call.kind, call.nbytes, group, instance, concurrent=members, nodes=config.nodes)
            entry = CollectiveCost(
                call.kind, call.group, call.nbytes, len(group), spanned, c.seconds, dict(c.link_bytes), c.bandwidth
            )
            if worst is None or entry.seconds > worst.seconds:
                worst = entry
        assert worst is not None
        return worst

    times: dict[str, GraphTime] = {}
    collectives: dict[str, tuple[CollectiveCost, ...]] = {}
    for name, graph in program.graphs.items():
        costs = tuple(cost(c) for c in graph.collectives)
        collectives[name] = costs
        times[name] = GraphTime(
            graph.compute_seconds, sum(c.seconds for c in costs), host.host_seconds(graph), exposed(graph, costs)
        )
    return StageCost(program, times, collectives)


def exposed(graph: TracedGraph, costs: tuple[CollectiveCost, ...], compute_scale: float = 1.0) -> float:
    """Seconds the graph's collectives add to its execution: each runs on the CC-cores from its
    place in the op chain, hidden behind the ops before the one that first needs its result
    (neurontools/contract/overlap.py, the rule the profile reader applies too)."""
    schedule = graph.schedule
    if not costs:
        return 0.0
    if schedule is None:
        return sum(c.seconds for c in costs)
    ops = schedule.ops
    calls = [(c.after_op, c.wait_op, cost.seconds) for c, cost in zip(schedule.collectives, costs, strict=True)]
    if compute_scale == 1.0:
        return place_calls(ops.index, ops.start, ops.end, calls).exposed
    scaled = [s * compute_scale for s in ops.start], [e * compute_scale for e in ops.end]
    return place_calls(ops.index, *scaled, calls).exposed


def _send_costs(
    config: ParallelConfig, instance: InstanceType, programs: dict[int, StageProgram], places: list[RankPlace]
) -> dict[int, float]:
    """Seconds to send a micro-batch's activation from stage s to s + 1 (its gradient comes back
    the same way at the same cost)."""
    out: dict[int, float] = {}
    pp_groups = config.grid.groups("pp")
    for s in range(config.pp - 1):
        pairs = [[g[s], g[s + 1]] for g in pp_groups]
        seconds = 0.0
        for pair in pairs:
            c = cost_group_collective(
                "send", programs[s].send_bytes, pair, instance, concurrent=pairs, nodes=config.nodes
            )
            seconds = max(seconds, c.seconds)
        out[s] = seconds
    return out


def graph_of(plan: JobPlan, stage: int, name: str) -> TracedGraph:
    return plan.stages[stage].program.graphs[name]


def retimed(plan: JobPlan, *, compute_scale: float = 1.0, host_per_op: float | None = None) -> JobPlan:
    """The same job with every graph's compute time multiplied by ``compute_scale`` and the host
    share re-modelled with ``host_per_op`` (for re-fitting the two fitted constants; collectives,
    which come from measurements, stay as they are)."""
    stages: dict[int, StageCost] = {}
    for s, cost in plan.stages.items():
        times = {}
        for name, t in cost.times.items():
            graph = cost.program.graphs[name]
            h = t.host_seconds if host_per_op is None else host.host_seconds(graph, host_per_op)
            left = exposed(graph, cost.collectives[name], compute_scale)
            times[name] = GraphTime(t.compute_seconds * compute_scale, t.collective_seconds, h, left)
        stages[s] = StageCost(cost.program, times, cost.collectives)
    send = _send_costs(plan.config, plan.instance, {s: c.program for s, c in plan.stages.items()}, plan.places)
    timeline, first = _timelines(plan.config, stages, send)
    return dataclasses.replace(plan, stages=stages, timeline=timeline, first_timeline=first)
