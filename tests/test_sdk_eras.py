"""SDK eras (docs/cost-model.md §SDK eras): a release maps to the newest modelled era at or before
it, its compiler efficiency times every graph, and the mechanisms it does not have yet are off."""

from __future__ import annotations

import dataclasses

import pytest

from emulator.cli import main
from emulator.costmodel import CostOptions, cost_graph, options_from_env
from emulator.costmodel.sdk import ERAS, NEWEST, era_of, has
from emulator.hardware import get_instance_type
from emulator.parallel.plan import ConfigError
from emulator.parallel.runner import JobRequest, plan_request, recipe_settings, resolve, withheld
from emulator.workloads.models.zoo import MODELS
from tests.test_costmodel import mm

TRN1_32 = get_instance_type("trn1.32xlarge")


def test_a_release_maps_to_the_newest_era_at_or_before_it() -> None:
    assert era_of("2.3").release == "2.3"
    assert era_of("2.17.1").release == "2.3"
    assert era_of("2.20").release == "2.18"
    assert era_of("2.21.0").release == "2.21"
    assert era_of("2.30").release == NEWEST == ERAS[-1].release
    for bad in ("2", "two.18", "2.18.x", "", "1.19"):
        with pytest.raises(ValueError) as info:
            era_of(bad)
        assert "\n" not in str(info.value)


def test_the_era_efficiency_times_every_graph() -> None:
    ops = [mm(512, 512, 512)] * 3
    old, new = (cost_graph(ops, CostOptions(sdk=r)) for r in ("2.3", "2.21"))
    assert old.efficiency == era_of("2.3").efficiency and new.efficiency == era_of("2.21").efficiency
    ratio = era_of("2.21").efficiency / era_of("2.3").efficiency
    assert old.device_seconds == pytest.approx(new.device_seconds * ratio)
    assert options_from_env({"NEURON_EMULATOR_SDK": "2.18.0"}).sdk == "2.18.0"
    with pytest.raises(ValueError):
        options_from_env({"NEURON_EMULATOR_SDK": "latest"})


def test_mechanisms_follow_the_release_notes() -> None:
    assert not has("2.18", "flash_attention") and has("2.19", "flash_attention")
    assert not has("2.11", "zero1") and has("2.12.2", "zero1")
    spec = MODELS["llama2-7b"]  # recipe: ZeRO-1, SP, selective, flash attention
    newest = recipe_settings(JobRequest("llama2-7b"), spec)
    assert newest["flash_attention"] and newest["recompute"] == "selective"
    before = recipe_settings(JobRequest("llama2-7b", sdk="2.18"), spec)
    assert not before["flash_attention"] and before["zero1"] and before["sequence_parallel"]
    assert withheld(JobRequest("llama2-7b", sdk="2.18")) == [
        "the flash-attention kernel arrived in Neuron SDK 2.19; --sdk 2.18 does not have it"
    ]
    assert withheld(JobRequest("llama2-7b")) == []
    oldest = recipe_settings(JobRequest("llama2-7b", sdk="2.3"), spec)
    assert oldest["recompute"] == "full" and not oldest["zero1"] and not oldest["sequence_parallel"]
    with pytest.raises(ConfigError, match=r"flash-attention kernel arrived in Neuron SDK 2\.19"):
        resolve(JobRequest("llama2-7b", sdk="2.18", flash_attention=True), TRN1_32)
    with pytest.raises(ConfigError, match="not a release number"):
        resolve(JobRequest("llama2-7b", sdk="newest"), TRN1_32)


def test_plans_carry_their_release() -> None:
    trn1_2 = get_instance_type("trn1.2xlarge")
    base = JobRequest("vit-base", dp=2, micro_batch=2)
    old = plan_request(dataclasses.replace(base, sdk="2.3"), trn1_2, env={})
    new = plan_request(base, trn1_2, env={})
    assert (old.options.sdk, new.options.sdk) == ("2.3", NEWEST)
    ratio = era_of(NEWEST).efficiency / era_of("2.3").efficiency
    for name, graph in old.stages[0].program.graphs.items():
        assert graph.compute_seconds == pytest.approx(new.stages[0].program.graphs[name].compute_seconds * ratio)


def test_bench_sdk_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--sdk", "2.18"]) == 1
    assert "--sdk goes with MODEL or --recipes" in capsys.readouterr().err
    assert main(["bench", "llama2-7b", "--sdk", "1.0"]) == 1
    err = capsys.readouterr().err
    assert "older than the oldest modelled release" in err and err.count("\n") == 1
