"""The snapshot written once (docs/snapshot.md): the daemon writes its models, the tools read them
back, the OpenAPI schema describes them; reuse of unchanged sections; the shared JSON checks."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import jsonschema_rs
import pytest

from neurontools.contract.json_values import (
    describe,
    expect_array,
    expect_number,
    expect_object,
    index_or_none,
    integer_or_none,
    json_kind,
    json_type_name,
    number_or_none,
)
from neurontools.contract.schema import ENGINE_KEYS
from neurontools.contract.snapshot import SCHEMA_VERSION, SNAPSHOT, SnapshotError, SnapshotParser
from neurontools.contract.snapshot_models import SCHEMA_VERSION_EXPECTED
from tests.fuzz_support import AUTH, AsgiClient, daemon_app, seed_daemon
from tests.snapshots import later, loaded_model, parsed, recorded, runtime_process
from tests.snapshots import snapshot as made_snapshot


def _shape(value: Any) -> Any:
    """Keys in order and JSON types, lists by the set of their items' shapes."""
    if isinstance(value, dict) and value and all(k.isdigit() for k in value):  # keyed by core: any cores
        return ["<core>", sorted({json.dumps(_shape(v)) for v in value.values()})]
    if isinstance(value, dict):
        return [(k, _shape(v)) for k, v in value.items()]
    if isinstance(value, list):
        return sorted({json.dumps(_shape(v)) for v in value})
    return json_kind(value)


@pytest.fixture(scope="module")
def busy_daemon() -> tuple[dict[str, Any], dict[str, Any]]:
    """A daemon's snapshot with running, exited (retired) and tool processes, ECC events and
    latencies, and its OpenAPI document."""
    client = AsgiClient(daemon_app("trn1.32xlarge"), AUTH)
    seed_daemon(client)
    seed_daemon(client)  # a second round of executions
    assert client.post("/v1/faults/ecc", {"neuron_device": 1, "event_type": "mem_ecc_corrected", "count": 2}).status
    runtime = [p["pid"] for p in client.get("/v1/processes").json() if p["kind"] == "runtime"]
    assert client.request("DELETE", f"/v1/processes/{runtime[0]}").status == 200  # its counters retire
    answer = client.get("/v1/snapshot")
    assert answer.status == 200
    return answer.json(), client.get("/openapi.json").json()


def test_the_daemon_writes_the_models_the_tools_read(busy_daemon: tuple[dict[str, Any], dict[str, Any]]) -> None:
    answer, _ = busy_daemon
    snap = parsed(answer)
    assert len(snap.runtime_processes) >= 1 and snap.latency_log and snap.retired is not None
    assert snap.retired.executions.completed > 0 and snap.hardware_counters[1].mem_ecc_corrected == 2
    # what the tools parse writes back as the same JSON: keys, their order, types and values
    assert json.dumps(SNAPSHOT.dump(snap)) == json.dumps(answer)
    # a snapshot made by the tests' helper has the daemon's shape
    helper = made_snapshot(
        time=1.0,
        monotonic=2.0,
        instance=snap.instance,
        hardware=snap.hardware,
        processes=[
            runtime_process(
                7,
                cores=(0,),
                busy={0: 0.5},
                flops={0: 10},
                engines={0: dict.fromkeys(ENGINE_KEYS, 0.1)},
                latencies=[(1.5, 0.2, 0.1)],
                models=[
                    loaded_model(
                        name="m",
                        uuid="u",
                        model_id=1,
                        core=0,
                        per_device=2,
                        device=dict.fromkeys(("constants", "model_code", "runtime_memory", "tensors"), 1),
                        host=dict.fromkeys(("application_memory", "constants", "dma_buffers", "tensors"), 0),
                    )
                ],
            )
        ],
        vcpus=[{"user": 1.0, "nice": 0.0, "system": 0.5, "idle": 9.0, "io_wait": 0.0, "irq": 0.0, "soft_irq": 0.0}],
    )
    daemon_proc, helper_proc = answer["processes"][0], helper["processes"][0]
    assert _shape(helper_proc) == _shape(daemon_proc)
    assert [k for k in helper] == [k for k in answer] and _shape(helper["host"]) == _shape(answer["host"])


def test_the_openapi_schema_describes_the_snapshot(busy_daemon: tuple[dict[str, Any], dict[str, Any]]) -> None:
    answer, spec = busy_daemon
    ok = spec["paths"]["/v1/snapshot"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/Snapshot"}
    schemas = spec["components"]["schemas"]
    assert {"Snapshot", "RuntimeProcess", "ToolProcess", "CoreCounters", "LoadedModel"} <= set(schemas)
    validator = jsonschema_rs.Draft202012Validator({**ok, "components": spec["components"]})
    assert validator.is_valid(answer), [e.message for e in validator.iter_errors(answer)][:3]
    # the schema is not vacuous: what the tools refuse, it refuses too
    for mutate in (
        lambda d: d["processes"][0]["cores"].update(
            {"x": d["processes"][0]["cores"][next(iter(d["processes"][0]["cores"]))]}
        ),
        lambda d: d["processes"][0]["executions"].pop("timed_out"),
        lambda d: d["latency_log"].append([1, 2.0, 3.0]),
        lambda d: d["processes"][0].update(kind="daemon"),
        lambda d: d["host"].update(context_switches="many"),
    ):
        bad = json.loads(json.dumps(answer))
        mutate(bad)
        assert not validator.is_valid(bad)
        with pytest.raises(SnapshotError):
            parsed(bad)


def test_snapshot_parser_reuses_only_unchanged_sections() -> None:
    first = recorded("trn1_2xlarge_train_cur")
    parser = SnapshotParser()
    a = parser.parse(first)
    b = parser.parse(later(first, busy={0: 0.5}))  # counters move, memory and models do not
    pa, pb = a.process(4242), b.process(4242)
    assert pa is not None and pb is not None
    assert pb.memory is pa.memory and pb.loaded_models is pa.loaded_models
    assert pb.cores[0].busy == pa.cores[0].busy + 0.5
    # the process's and the retired totals' (pid 0) sections, parsed once
    assert parser.parsed == Counter({"memory": 2, "loaded_models": 2})

    grown = later(first, 2.0)
    grown["processes"][0]["memory"]["cores"]["0"]["tensors"] += 1024
    c = parser.parse(grown)
    pc = c.process(4242)
    assert pc is not None and pc.memory is not pb.memory and pc.loaded_models is pb.loaded_models
    assert pc.memory.cores[0].tensors == pb.memory.cores[0].tensors + 1024
    assert parser.parsed == Counter({"memory": 3, "loaded_models": 2})

    broken = later(grown)  # a changed section is validated again
    broken["processes"][0]["memory"]["cores"]["0"]["tensors"] = "lots"
    with pytest.raises(
        SnapshotError, match=r"^snapshot\.processes\[0\]\.memory\.cores\['0'\]\.tensors: expected an integer"
    ):
        parser.parse(broken)

    gone = later(grown)  # a process that leaves is forgotten: when it comes back it is parsed afresh
    gone["processes"] = [p for p in gone["processes"] if p["pid"] != 4242]
    parser.parse(gone)
    back = parser.parse(later(grown, 3.0))
    assert back.process(4242) == pc and parser.parsed == Counter({"memory": 4, "loaded_models": 3})


def test_json_values_name_and_check() -> None:
    assert [json_type_name(v) for v in (None, True, 1, 1.5, "x", [], {})] == [
        "null",
        "a boolean",
        "a number",
        "a number",
        "a string",
        "an array",
        "an object",
    ]
    assert [describe(v) for v in ("x", 1.5, True, None, [1], {"a": 1})] == [
        "'x'",
        "1.5",
        "True",
        "null",
        "an array",
        "an object",
    ]

    class Bad(ValueError):
        pass

    with pytest.raises(Bad, match=r"^report\.x: expected an object, got an array$"):
        expect_object([], "report.x", Bad)
    with pytest.raises(Bad, match=r"^y: expected an array, got 'z'$"):
        expect_array("z", "y", Bad)
    with pytest.raises(ValueError, match=r"^n: expected a number, got True$"):
        expect_number(True, "n")
    assert expect_number(3, "n") == 3.0 and type(expect_number(3, "n")) is float
    assert [number_or_none(v, 100) for v in (5, 5.5, 100, True, "5", float("nan"), float("inf"))] == [
        5.0,
        5.5,
        None,
        None,
        None,
        None,
        None,
    ]
    assert [integer_or_none(v, 100) for v in (7, 7.0, 7.5, -99, 100, False)] == [7, 7, None, -99, None, None]
    assert [index_or_none(k, 3) for k in ("0", "012", "1234", "-1", " 1", "١", 1)] == [
        0,
        12,
        None,
        None,
        None,
        None,
        None,
    ]


@pytest.mark.parametrize("version", [2, 0, "1", True, None, "absent"])
def test_a_snapshot_of_another_schema_version_is_refused_with_one_error(version: object) -> None:
    data = recorded("trn1_2xlarge_train_cur")
    assert parsed(data).schema_version == SCHEMA_VERSION == data["schema_version"]
    if version == "absent":
        del data["schema_version"]
        got = "no schema_version"
    else:
        data["schema_version"] = version
        got = repr(version) if version is not None else "null"
    del data["processes"]  # refused for its version before anything else is read
    with pytest.raises(SnapshotError) as err:
        parsed(data)
    assert str(err.value) == f"snapshot.schema_version: expected {SCHEMA_VERSION_EXPECTED}, got {got}"
