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
from emulator.costmodel.sdk import NEWEST, has, missing, release_key
from emulator.hardware.instance_types import InstanceType
from emulator.parallel.job import JobPlan, plan_job
from emulator.parallel.plan import ConfigError, ParallelConfig, make_config
from emulator.parallel.ranks import ParallelState
from emulator.workloads.models import zoo
from emulator.workloads.models.recipes import RECIPES, SWITCHES_OFF, Recipe
from emulator.workloads.models.zoo import MODELS, ModelSpec


@dataclass(frozen=True)
class JobRequest:
    """What a user asked for, before it is checked against the model and the instance. ``None``
    means "as the model's published recipe has it" (``emulator/workloads/models/recipes.py``):
    the layout (tp, pp), micro-batch, sequence and every memory/kernel switch; with
    ``published_scale`` also the nodes, data-parallel size and global batch of the published run
    (what ``bench`` plans), else one node filled, one micro-batch per replica (what ``run`` does).
    A model without a recipe: tp = pp = 1, micro-batch 1, its default sequence, switches off."""

    model: str
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    micro_batch: int | None = None
    global_batch: int | None = None
    seq_len: int | None = None
    nodes: int | None = None
    zero1: bool | None = None
    recompute: str | None = None  # "none", "selective", "full"
    recompute_mlp: str | None = None  # "none", "activation", "module"
    sequence_parallel: bool | None = None
    flash_attention: bool | None = None
    master_weights: bool | None = None
    schedule: str = "1f1b"
    dtype: str = "bf16"
    auto_cast: str | None = None
    sdk: str | None = None  # the Neuron SDK release modelled (None: NEURON_EMULATOR_SDK, else the newest era)
    published_scale: bool = False


def resolve(
    request: JobRequest, instance: InstanceType, env: Mapping[str, str] | None = None
) -> tuple[ParallelConfig, ModelSpec]:
    """The checked configuration and the model spec; ConfigError with one line otherwise."""
    spec = MODELS.get(request.model)
    if spec is None:
        raise ConfigError(f"unknown model {request.model!r} (model-scale models: {', '.join(MODELS)})")
    recipe = RECIPES.get(spec.name)
    layout = _layout(request, recipe, spec)
    switches = recipe_settings(request, spec, env)
    try:
        config = make_config(cores_per_node=instance.core_count, schedule=request.schedule, **layout, **switches)
    except ConfigError as exc:
        if recipe is None or (request.tp is not None and request.pp is not None):
            raise
        raise ConfigError(
            f"{exc} (TP {layout['tp']} x PP {layout['pp']} is {spec.name}'s published recipe, {recipe.label}: "
            "give --tp and --pp for this instance)"
        ) from None
    try:
        zoo.validate(spec, config.tp, config.pp, config.seq_len, sequence_parallel=config.sequence_parallel)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return config, spec


def _layout(request: JobRequest, recipe: Recipe | None, spec: ModelSpec) -> dict[str, Any]:
    """tp, pp, dp, micro- and global batch, sequence and nodes: as asked, else as the recipe."""

    def pick(asked: int | None, field: str, default: int) -> int:
        if asked is not None:
            return asked
        return int(getattr(recipe, field)) if recipe is not None else default

    scale = request.published_scale and recipe is not None
    # the published nodes and data-parallel size only when no layout was asked for (else dp fills them)
    published_grid = scale and all(v is None for v in (request.tp, request.pp, request.dp, request.nodes))
    return {
        "tp": _tp(request, recipe),
        "pp": pick(request.pp, "pp", 1),
        "micro_batch": pick(request.micro_batch, "micro_batch", 1),
        "seq_len": pick(request.seq_len, "seq_len", spec.default_seq_len),
        "nodes": request.nodes or (recipe.nodes if published_grid and recipe else 1),
        "dp": request.dp if request.dp is not None or not published_grid or recipe is None else recipe.dp,
        "global_batch": request.global_batch or (recipe.global_batch if scale and recipe else None),
    }


def _tp(request: JobRequest, recipe: Recipe | None) -> int:
    """The tensor-parallel degree: as asked, else the recipe's, else 1."""
    if request.tp is not None:
        return request.tp
    return recipe.tp if recipe is not None else 1


def release(request: JobRequest, env: Mapping[str, str] | None = None) -> str:
    """The Neuron SDK release the job is modelled at: as asked, else NEURON_EMULATOR_SDK, else the
    newest modelled era (docs/cost-model.md §SDK eras)."""
    value = request.sdk or (os.environ if env is None else env).get("NEURON_EMULATOR_SDK") or NEWEST
    try:
        release_key(value)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return value


# switch -> the mechanism of emulator/costmodel/sdk.py it needs (recompute: only "selective")
_FEATURES = {"zero1": "zero1", "sequence_parallel": "sequence_parallel", "flash_attention": "flash_attention"}


def recipe_settings(request: JobRequest, spec: ModelSpec, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The memory and kernel switches: as asked, else as the model's published recipe has them
    (sequence parallelism only with tensor parallelism, where it exists; off without a recipe).
    A recipe's switch the SDK release does not have yet is off (selective recomputation falls back
    to full); asking for one is a ConfigError."""
    recipe = RECIPES.get(spec.name)
    published = recipe.switches() if recipe else {}
    out: dict[str, Any] = {}
    for name, off in SWITCHES_OFF.items():
        asked = getattr(request, name)
        out[name] = asked if asked is not None else published.get(name, off)
    if request.sequence_parallel is None and _tp(request, recipe) == 1:
        out["sequence_parallel"] = False
    if request.recompute_mlp is None and request.recompute not in (None, "selective"):
        out["recompute_mlp"] = "none"  # --no-recompute keeps every activation; full recomputes the MLP anyway
    sdk = release(request, env)
    for name, feature in (*_FEATURES.items(), ("recompute", "selective_recompute")):
        wanted = out[name] == "selective" if name == "recompute" else bool(out[name])
        if wanted and not has(sdk, feature):
            if getattr(request, name) is not None:
                raise ConfigError(missing(sdk, feature))
            out[name] = "full" if name == "recompute" else False
    return out


def recipe_defaults(request: JobRequest) -> list[str]:
    """The switches the model's recipe turned on because the request left them open."""
    spec = MODELS.get(request.model)
    if spec is None:
        return []
    settings = recipe_settings(request, spec)
    return [name for name, value in settings.items() if getattr(request, name) is None and value not in (False, "none")]


def withheld(request: JobRequest) -> list[str]:
    """One line for each switch of the model's recipe the job's SDK release does not have yet."""
    spec = MODELS.get(request.model)
    recipe = RECIPES.get(request.model)
    if spec is None or recipe is None:
        return []
    sdk, settings = release(request), recipe_settings(request, spec)
    published = recipe.switches()
    return [
        missing(sdk, feature)
        for name, feature in (*_FEATURES.items(), ("recompute", "selective_recompute"))
        if getattr(request, name) is None and settings[name] != published[name] and not has(sdk, feature)
    ]


def cost_options(dtype: str, auto_cast: str | None, env: Mapping[str, str], sdk: str = NEWEST) -> CostOptions:
    """The compiler/runtime options of the job at SDK release ``sdk``: BF16 parameters train with
    stochastic rounding (as the published BF16+SR rows do) unless NEURON_RT_STOCHASTIC_ROUNDING_EN
    says otherwise."""
    try:
        options = dataclasses.replace(options_from_env(env, auto_cast), sdk=sdk)
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

    env = os.environ if env is None else env
    config, spec = resolve(request, instance, env)
    options = cost_options(request.dtype, request.auto_cast, env, release(request, env))

    def stage_builder(state: ParallelState) -> tuple[Callable[[], Any], Callable[[Any], Any], int]:
        def build() -> Any:
            return build_stage(
                spec,
                seq_len=config.seq_len,
                recompute=config.recompute,
                recompute_mlp=config.recompute_mlp,
                flash_attention=config.flash_attention,
            )

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
