"""One execution record (emulator/runtime/execution.py): the one function that applies a core's
faults (docs/faults.md), and the type as the daemon's wire model."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import TypeAdapter, ValidationError

from emulator.runtime.execution import (
    Collective,
    CompileCacheCounter,
    CompileCacheCounts,
    CoreMemory,
    Execution,
    Holding,
    MemoryReport,
    ModelRef,
    Work,
    execution,
)
from emulator.runtime.faults import CoreFaults

HOLDING = Holding(
    model=ModelRef(model_id=10001, uuid="0" * 32, name="g", code_bytes=1 << 20),
    compile_cache=CompileCacheCounts(hits=2, misses=1),
    memory=MemoryReport(core=CoreMemory(1, 2, 0, 3, 4), peak=10),
)
INTER = Collective("all_reduce", 1 << 20, ranks=4, nodes=2, count=3, seconds=0.1)
INTRA = Collective("all_reduce", 1 << 20, ranks=4, nodes=1, count=5, seconds=0.2)
WORK = Work(device_seconds=2.0, flops=10**9, engines={"tensor": 0.5}, collectives=(INTER, INTRA), host_seconds=0.25)


def test_a_healthy_core_reports_the_modelled_work() -> None:
    ex = execution(3, 100.0, WORK, HOLDING)
    assert (ex.core, ex.start, ex.device_seconds, ex.compute_seconds) == (3, 100.0, 2.0, 2.0)
    assert ex.total_latency == 2.25 and ex.flops == 10**9 and ex.outcome == "completed"
    assert ex.engines == {"tensor": 0.5, "vector": 0.0, "scalar": 0.0, "gpsimd": 0.0, "dma": 0.0}
    assert ex.collectives == (INTER, INTRA) and ex.model == HOLDING.model and ex.memory == HOLDING.memory


def test_cut_efa_bandwidth_stretches_only_inter_node_collectives() -> None:
    ex = execution(0, 1.0, WORK, HOLDING, CoreFaults(efa_bandwidth_factor=0.5))
    inter, intra = ex.collectives
    assert inter.seconds == pytest.approx(0.2) and intra.seconds == pytest.approx(0.2)  # the EFA one: 2x
    assert ex.device_seconds == pytest.approx(2.0 + 3 * 0.1)  # three inter-node collectives, 0.1 s more each
    assert ex.engines["tensor"] == 0.5


def test_a_slow_core_stretches_everything_efa_on_top() -> None:
    ex = execution(0, 1.0, WORK, HOLDING, CoreFaults(slow_factor=3.0, efa_bandwidth_factor=0.5))
    assert ex.device_seconds == pytest.approx((2.0 + 0.3) * 3.0)
    assert [c.seconds for c in ex.collectives] == pytest.approx([0.6, 0.6])
    assert ex.engines["tensor"] == pytest.approx(1.5) and ex.flops == 10**9


def test_nan_timeout_and_numerical_errors_set_the_outcome() -> None:
    assert execution(0, 1.0, WORK, HOLDING, CoreFaults(nan=True)).outcome == "completed_with_num_err"
    assert execution(0, 1.0, WORK, HOLDING, numerical_error=lambda: True).outcome == "completed_with_num_err"
    late = execution(0, 1.0, WORK, HOLDING, CoreFaults(slow_factor=2.0), timeout=3.0)
    assert late.outcome == "timed_out" and late.device_seconds == 4.0 and late.total_latency == 3.25


def test_an_armed_ecc_error_and_a_lost_peer_end_the_execution_at_once() -> None:
    failed = execution(0, 1.0, WORK, HOLDING, CoreFaults(hardware_error="mem_ecc_uncorrected"))
    assert (failed.outcome, failed.error) == ("completed_with_err", "hardware")
    assert failed.device_seconds == failed.flops == 0
    assert failed.collectives == () and failed.model == HOLDING.model
    stuck = execution(0, 1.0, WORK, HOLDING, peer_lost=True)
    assert (stuck.outcome, stuck.error, stuck.device_seconds) == ("timed_out", None, 0.0)


def test_the_compile_cache_counts_restart_with_a_new_daemon() -> None:
    counts = CompileCacheCounter()
    counts.count(hit=False)
    counts.count(hit=True)
    assert counts.reported() == CompileCacheCounts(hits=1, misses=1)
    counts.registered()
    counts.count(hit=True)
    assert counts.reported() == CompileCacheCounts(hits=1, misses=0) and (counts.hits, counts.misses) == (2, 1)


def test_the_wire_form_validates_back_into_the_same_execution() -> None:
    adapter = TypeAdapter(Execution)
    ex = execution(0, 1.0, WORK, HOLDING, CoreFaults(slow_factor=2.0, efa_bandwidth_factor=0.25))
    assert adapter.validate_python(json.loads(json.dumps(ex.to_wire()))) == ex
    wire = ex.to_wire()
    for bad in ({"start": math.nan}, {"device_seconds": math.inf}, {"flops": -1}, {"outcome": "fine"}):
        with pytest.raises(ValidationError):
            adapter.validate_python({**wire, **bad})
    with pytest.raises(ValidationError, match="needs outcome"):
        adapter.validate_python({**wire, "error": "hardware"})


def test_the_wire_models_engine_names_are_the_contracts() -> None:
    from typing import get_args

    from emulator.runtime.execution import Engine
    from neurontools.contract.names import ENGINE_KEYS

    assert get_args(Engine) == tuple(ENGINE_KEYS)
