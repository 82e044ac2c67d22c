"""Model-scale jobs: a request (model of the zoo, layout, batch) checked against the model and the
instance, then traced, costed and scheduled — the planning ``neuron-emulator run MODEL`` and
``bench`` share. A configuration that does not divide the model, the batch or the cores is a
one-line :class:`ConfigError`."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from emulator.costmodel import CostOptions, options_from_env
from emulator.hardware.instance_types import InstanceType
from emulator.parallel.job import JobPlan, plan_job
from emulator.parallel.plan import ConfigError, ParallelConfig, make_config
from emulator.parallel.ranks import ParallelState
from emulator.workloads.models import zoo
from emulator.workloads.models.zoo import MODELS, ModelSpec


@dataclass(frozen=True)
class JobRequest:
    """What a user asked for, before it is checked against the model and the instance."""

    model: str
    tp: int = 1
    pp: int = 1
    dp: int | None = None
    micro_batch: int | None = None
    global_batch: int | None = None
    seq_len: int | None = None
    nodes: int = 1
    zero1: bool | None = None  # None: the model's published recipe decides (ModelSpec.recipe)
    recompute: bool = False
    sequence_parallel: bool | None = None
    schedule: str = "1f1b"
    dtype: str = "bf16"
    auto_cast: str | None = None


def resolve(request: JobRequest, instance: InstanceType) -> tuple[ParallelConfig, ModelSpec]:
    """The checked configuration and the model spec; ConfigError with one line otherwise."""
    spec = MODELS.get(request.model)
    if spec is None:
        raise ConfigError(f"unknown model {request.model!r} (model-scale models: {', '.join(MODELS)})")
    seq_len = request.seq_len or spec.default_seq_len
    micro_batch = request.micro_batch or 1
    zero1, sequence_parallel = recipe_settings(request, spec)
    config = make_config(
        cores_per_node=instance.core_count,
        tp=request.tp,
        pp=request.pp,
        dp=request.dp,
        micro_batch=micro_batch,
        global_batch=request.global_batch,
        seq_len=seq_len,
        nodes=request.nodes,
        zero1=zero1,
        recompute=request.recompute,
        sequence_parallel=sequence_parallel,
        schedule=request.schedule,
    )
    try:
        zoo.validate(spec, config.tp, config.pp, seq_len, sequence_parallel=config.sequence_parallel)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return config, spec


def recipe_settings(request: JobRequest, spec: ModelSpec) -> tuple[bool, bool]:
    """ZeRO-1 and sequence parallelism: as asked, else as the model's published recipe has them
    (sequence parallelism only with tensor parallelism, where it exists)."""
    zero1 = request.zero1 if request.zero1 is not None else "zero1" in spec.recipe
    if request.sequence_parallel is not None:
        return zero1, request.sequence_parallel
    return zero1, "sequence_parallel" in spec.recipe and request.tp > 1


def recipe_defaults(request: JobRequest) -> list[str]:
    """The settings the model's recipe turned on because the request left them open."""
    spec = MODELS.get(request.model)
    if spec is None:
        return []
    zero1, sp = recipe_settings(request, spec)
    out = []
    if request.zero1 is None and zero1:
        out.append("zero1")
    if request.sequence_parallel is None and sp:
        out.append("sequence_parallel")
    return out


def cost_options(dtype: str, auto_cast: str | None, env: Mapping[str, str]) -> CostOptions:
    """The compiler/runtime options of the job: BF16 parameters train with stochastic rounding
    (as the published BF16+SR rows do) unless NEURON_RT_STOCHASTIC_ROUNDING_EN says otherwise."""
    try:
        options = options_from_env(env, auto_cast)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if dtype == "bf16" and "NEURON_RT_STOCHASTIC_ROUNDING_EN" not in env:
        options = dataclasses.replace(options, stochastic_rounding=True)
    return options


def plan_request(
    request: JobRequest,
    instance: InstanceType,
    env: Mapping[str, str] | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> JobPlan:
    """Trace, cost and schedule a job (no daemon needed)."""
    from emulator.parallel.models.stage import build_stage, stage_inputs

    config, spec = resolve(request, instance)
    options = cost_options(request.dtype, request.auto_cast, os.environ if env is None else env)

    def stage_builder(state: ParallelState) -> tuple[Callable[[], Any], Callable[[Any], Any], int]:
        def build() -> Any:
            return build_stage(spec, seq_len=config.seq_len, recompute=config.recompute)

        def inputs(module: Any) -> Any:
            return stage_inputs(spec, module, config.micro_batch, config.seq_len)

        return build, inputs, 0

    return plan_job(
        request.model,
        config,
        instance,
        dtype=request.dtype,
        options=options,
        stage_builder=stage_builder,
        parameters_total=zoo.count_parameters(spec),  # the whole, unsharded model (what MFU counts)
        tokens_per_sample=zoo.tokens_per_sample(spec, config.seq_len),
        sample_unit=spec.sample_unit,
        progress=progress,
    )
