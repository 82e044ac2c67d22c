"""The field table (``neurontools/report/fields.py``) and the names (``contract/names.py``) are the only
place a quantity's description, unit, family or neuron-top label, and a category, engine or ECC
event name, is written: the tools read them from there (docs/architecture.md §Who owns what).

The source scans look at string literals (docstrings and comments may mention any name); the
runtime checks compare what the exporter and neuron-top actually publish with the table.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from emulator.costmodel.engines import BUSY_ENGINES
from neurontools.contract import names
from neurontools.exporter import rest
from neurontools.exporter.collector import CollectedState, Collector, history_values
from neurontools.exporter.extended import ExtendedCollector
from neurontools.report import fields
from neurontools.report.fields import EACH_STEP, Quantity
from neurontools.sources.daemon_client import DaemonError
from neurontools.top import memory_tree, view
from neurontools.top.model import ENGINE_NAMES

ROOT = Path(__file__).resolve().parent.parent
TABLES = {ROOT / "neurontools/contract/names.py", ROOT / "neurontools/report/fields.py"}
FIXTURES = ROOT / "tests/fixtures/report"

# String literals outside the table that are equal to a name but are something else, or that
# other engineers' files still spell (the daemon: see docs/architecture.md §Who owns what).
ALLOWED: dict[tuple[str, str], str] = {
    ("emulator/capture/meta_cache.py", "tensor"): "a __slots__ attribute",
    ("emulator/parallel/tracer.py", "model_code"): "a StageMemory field",
    ("emulator/runtime/memory.py", "tensors"): "prose of the runtime's out-of-memory message",
    **{("emulator/costmodel/engines.py", e): "the cost model's Engine enum (checked below)" for e in names.ENGINE_KEYS},
    **{("emulator/parallel/plan_file.py", c): "per-category values of a planned stage" for c in names.CORE_MEMORY_KEYS},
    **{("emulator/runtime/execution.py", e): "the Execution model's Engine Literal" for e in names.ENGINE_KEYS},
    **{
        ("emulator/daemon/api_models.py", n): "daemon request models: Literal types"
        for n in (*names.CORE_MEMORY_KEYS, *names.ENGINE_KEYS, *names.ECC_EVENTS)
    },
    **{
        ("emulator/daemon/telemetry.py", n): "daemon counters: to import report.names.ECC_EVENTS"
        for n in (*names.ECC_EVENTS, *names.HOST_MEMORY_KEYS, *names.SUBGRAPH_DEVICE_MEMORY_KEYS)
    },
}


def _literals(*roots: str) -> Iterator[tuple[str, int, str]]:
    """(path relative to the repository, line, value) of every string literal under ``roots``,
    the two table modules left out."""
    for root in roots:
        for path in sorted((ROOT / root).rglob("*.py")):
            if path in TABLES:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    yield str(path.relative_to(ROOT)), node.lineno, node.value


def _quantities() -> list[Quantity]:
    return list(fields.quantities())


# -- names ----------------------------------------------------------------------------------------


def test_category_engine_and_event_names_are_spelled_only_in_report_names() -> None:
    spelled = {c.key for c in names.MEMORY_CATEGORIES} | set(names.ENGINE_KEYS) | set(names.ECC_EVENTS)
    found = [
        f"{path}:{line}: {value!r}"
        for path, line, value in _literals("neurontools", "emulator")
        if value in spelled and (path, value) not in ALLOWED
    ]
    assert not found, "spell these with neurontools.contract.names:\n" + "\n".join(found)


def test_name_orders() -> None:
    # the report writes memory objects as Go maps (sorted keys), hw counters in struct order
    assert names.CORE_MEMORY_KEYS == ("constants", "model_code", "model_shared_scratchpad", "runtime_memory", "tensors")
    assert names.HOST_MEMORY_KEYS == ("application_memory", "constants", "dma_buffers", "tensors")
    assert names.SUBGRAPH_DEVICE_MEMORY_KEYS == ("constants", "model_code", "runtime_memory", "tensors")
    assert names.ENGINE_KEYS == ("tensor", "vector", "scalar", "gpsimd", "dma")
    assert names.HW_COUNTER_KEYS == (
        "mem_ecc_corrected",
        "mem_ecc_uncorrected",
        "sram_ecc_uncorrected",
        "sram_ecc_corrected",
    )
    assert names.ECC_EVENTS == (
        "mem_ecc_corrected",
        "mem_ecc_uncorrected",
        "sram_ecc_corrected",
        "sram_ecc_uncorrected",
    )
    assert tuple(e.value for e in BUSY_ENGINES) == names.ENGINE_KEYS  # the cost model's engines are the snapshot's


# -- Prometheus families --------------------------------------------------------------------------


class _Recorded:
    """A daemon that answers the recorded training snapshots in turn (and no inventory)."""

    def __init__(self, answers: list[dict]) -> None:
        self.answers = answers

    def get(self, path: str) -> dict:
        if path.startswith("/snapshot"):
            return self.answers.pop(0)
        raise DaemonError(404, {"error": "not found"})


def _full_state() -> CollectedState:
    """The exporter's state after collecting the recorded pair (the second collection: rates)."""
    prev, cur = (json.loads((FIXTURES / f"trn1_2xlarge_train_{n}.json").read_text()) for n in ("prev", "cur"))
    # a training job's counters (docs/multinode.md): the recording has none
    job = {"job_id": "vit-base-20261124-120000-1", "steps": 3, "step_seconds": 1.1, "wait_seconds": 0.4, "samples": 12}
    collector = Collector(_Recorded([prev, {**cur, "jobs": [job]}]), 1.0)
    collector.collect_once()
    return collector.collect_once()


def test_every_exposed_family_is_a_table_quantity_with_its_help_and_labels() -> None:
    table = {q.prometheus.name: q for q in _quantities() if q.prometheus is not None}
    assert len(table) == sum(1 for q in _quantities() if q.prometheus is not None), "a family name twice"
    exposed = {}
    for metric in ExtendedCollector(_full_state, per_process=True).collect():
        # prometheus_client keeps counters and infos without their suffix
        name = metric.name + {"counter": "_total", "info": "_info"}.get(metric.type, "")
        assert name in table, f"{name} is exposed but not in report/fields.py"
        q = table[name]
        assert metric.documentation == q.text and metric.type == q.prometheus.kind
        assert metric.samples, f"{name}: no sample from a full state"
        for sample in metric.samples:
            assert set(sample.labels) - {"le"} == set(q.prometheus.labels), name
        exposed[name] = q
    assert set(exposed) == set(table), "a table family is not exposed"


def test_family_names_are_spelled_only_in_the_table() -> None:
    families = {q.prometheus.name for q in _quantities() if q.prometheus is not None}
    found = [f"{p}:{line}: {v!r}" for p, line, v in _literals("neurontools") if v in families]
    assert not found, "name families with report.fields quantities:\n" + "\n".join(found)


# -- REST descriptions and history ----------------------------------------------------------------


def _rest_models() -> list[type[BaseModel]]:
    return [m for m in vars(rest).values() if isinstance(m, type) and issubclass(m, BaseModel) and m is not BaseModel]


def test_every_rest_description_is_the_table_text_of_a_quantity_with_that_key() -> None:
    by_key: dict[str, set[str]] = {}
    for q in _quantities():
        by_key.setdefault(q.key, set()).add(q.text)
    described = 0
    for model in _rest_models():
        for name, info in model.model_fields.items():
            if info.description is not None:
                described += 1
                assert info.description in by_key.get(name, set()), f"{model.__name__}.{name}: {info.description!r}"
    assert described >= 20


def test_rest_field_descriptions_are_not_written_in_rest_py() -> None:
    """Every ``Field(description=...)`` reads ``fields.<QUANTITY>.text``."""
    tree = ast.parse((ROOT / "neurontools/exporter/rest.py").read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "Field"]
    assert calls
    for call in calls:
        [description] = [k.value for k in call.keywords if k.arg == "description"]
        ok = (
            isinstance(description, ast.Attribute)
            and description.attr == "text"
            and isinstance(description.value, ast.Attribute)
            and getattr(description.value.value, "id", None) == "fields"
            and isinstance(getattr(fields, description.value.attr, None), Quantity)
        )
        assert ok, f"rest.py line {call.lineno}: description not taken from the field table"


def test_quantity_texts_are_written_only_in_the_table() -> None:
    texts = {q.text for q in _quantities()} | {q.text_over(EACH_STEP) for q in _quantities()}
    found = [f"{p}:{line}: {v!r}" for p, line, v in _literals("neurontools") if v in texts]
    assert not found, "\n".join(found)


def test_history_metrics_come_from_the_table() -> None:
    series = [*((q, True) for q in fields.HISTORY_PER_CORE), *((q, False) for q in fields.HISTORY_HOST)]
    assert [(n, m.unit, m.per_core, m.description) for n, m in rest.HISTORY_METRICS.items()] == [
        (q.key, q.unit, per_core, q.text_over(EACH_STEP)) for q, per_core in series
    ]
    state = _full_state()
    assert state.previous is not None and state.snapshot is not None
    keys = {key for key, _ in history_values(state.previous, state.snapshot)}
    assert keys == set(rest.HISTORY_METRICS)


def test_history_metrics_as_published() -> None:
    """What ``/api/v1/history/metrics`` shows, pinned (the table must not change it by accident)."""
    assert {n: (m.unit, m.per_core, m.description) for n, m in rest.HISTORY_METRICS.items()} == {
        "utilization": ("ratio", True, "NeuronCore busy share over each step (0-1)"),
        "flops_per_second": ("flops/s", True, "FLOPs executed per second over each step"),
        "hbm_used_bytes": ("bytes", True, "device memory held on the NeuronCore, all categories"),
        **{
            f"{e}_engine_utilization": ("ratio", True, f"{e} engine busy share over each step (0-1)")
            for e in ("tensor", "vector", "scalar", "gpsimd", "dma")
        },
        "host_cpu_utilization": ("ratio", False, "host CPU busy share (all vCPUs) over each step (0-1)"),
        "host_memory_used_bytes": ("bytes", False, "host memory in use"),
    }


# -- neuron-top -----------------------------------------------------------------------------------


def test_top_labels_are_spelled_only_in_the_table() -> None:
    labels = {n.label for n in (*names.MEMORY_CATEGORIES, *names.ENGINES)} | {q.label for q in _quantities()}
    labels.discard("")
    found = [f"{p}:{line}: {v!r}" for p, line, v in _literals("neurontools/top") if v in labels]
    assert not found, "take neuron-top labels from report.names / report.fields:\n" + "\n".join(found)


def test_top_rows_follow_the_category_and_engine_tables() -> None:
    assert [key for _, key in view.HOST_ROW[1:]] == [c.key for c in names.MEMORY_CATEGORIES if c.host]
    assert [key for _, key in view.DEVICE_ROW[1:]] == [c.key for c in names.MEMORY_CATEGORIES if c.device]
    assert {key for _, key, _ in memory_tree.CATEGORIES} == set(names.CORE_MEMORY_KEYS)
    assert list(ENGINE_NAMES) == list(names.ENGINE_KEYS)
    # labels shown on screen (tests/__snapshots__ pin the screens byte for byte)
    assert [label for label, _ in view.DEVICE_ROW] == [
        "Total",
        "Tensors",
        "Constants",
        "Model Code",
        "Runtime Memory",
        "Model Scratchpad",
    ]
    assert [label for label, _ in view.HOST_ROW] == ["Total", "Tensors", "Constants", "DMA Buffers", "App. Memory"]
    assert list(ENGINE_NAMES.values()) == ["TensorE", "VectorE", "ScalarE", "GpSimd", "DMA"]


@pytest.mark.parametrize("quantity", _quantities(), ids=lambda q: q.key)
def test_every_quantity_is_complete(quantity: Quantity) -> None:
    assert (
        quantity.key
        and quantity.description
        and quantity.unit
        in {
            fields.RATIO,
            fields.BYTES,
            fields.SECONDS,
            fields.FLOPS,
            fields.FLOPS_PER_SECOND,
            fields.PERCENT,
            fields.PER_SECOND,
            fields.NO_UNIT,
        }
    )
    if quantity.prometheus is not None:
        assert quantity.prometheus.kind in {fields.COUNTER, fields.GAUGE, fields.HISTOGRAM, fields.INFO}
        if quantity.prometheus.kind == fields.COUNTER:
            assert quantity.prometheus.name.endswith("_total")
