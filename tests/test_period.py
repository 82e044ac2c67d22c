"""The period's figures are derived once (neurontools/report/period.py, docs/architecture.md) and
every tool reads them: neuron-top's grid and engine table agree with each other, and the
exporter's per-core figures add what a process that exited during the period did."""

from __future__ import annotations

from typing import Any

import pytest

from neurontools.report.period import measure
from neurontools.top.sources import DaemonSource
from neurontools.top.view import core_utilizations
from tests.snapshots import instance, parsed, runtime_process, snapshot, trn1_hardware

ENGINE_SHARE = {"tensor": 0.5, "vector": 0.25, "scalar": 0.1, "gpsimd": 0.05, "dma": 0.3}
VCPU = {"user": 1.0, "nice": 0.0, "system": 0.0, "idle": 1.0, "io_wait": 0.0, "irq": 0.0, "soft_irq": 0.0}


def _proc(pid: int, busy: float) -> Any:
    """A process (pid 0: the daemon's retired totals) with ``busy`` seconds on core 0."""
    engines = {0: {name: busy * share for name, share in ENGINE_SHARE.items()}}
    return runtime_process(pid, cores=[0], busy={0: busy}, flops={0: int(busy * 1e12)}, engines=engines)


def _snap(t: float, processes: list[Any], retired: Any) -> dict[str, Any]:
    return snapshot(
        time=1795302762.0 + t,
        monotonic=5000.0 + t,
        instance=instance("trn1.2xlarge", "i-0123456789abcdef0"),
        hardware=trn1_hardware(1),
        processes=processes,
        vcpus=[{k: v * t for k, v in VCPU.items()}],
        retired=retired,
    )


def owner_changes_mid_period() -> list[dict[str, Any]]:
    """Process 100 uses core 0 for 0.8 s of the first second; in the second second it works 0.4 s
    more and exits (its final counters move into ``retired``), and process 200 attaches to core 0
    and works 0.1 s."""
    first = _snap(1.0, [_proc(100, 0.8)], _proc(0, 0.0))
    second = _snap(2.0, [_proc(200, 0.1)], _proc(0, 1.2))
    return [first, second]


class Replay:
    """A daemon client answering the given snapshots in turn (what neuron-top reads)."""

    def __init__(self, snapshots: list[dict[str, Any]]) -> None:
        self.snapshots = list(snapshots)

    def get(self, path: str) -> Any:
        assert path.startswith("/snapshot")
        return self.snapshots.pop(0)

    def post(self, path: str, body: Any) -> Any:
        return body

    def delete(self, path: str) -> Any:
        return {}


def test_neuron_top_grid_and_engine_table_agree_when_a_core_changes_owner() -> None:
    """The disagreement issue 11 found: the grid read the report (live processes: 10 %), the engine
    table read node rates (with the exited process: 50 %) for the same core and period."""
    source = DaemonSource(Replay(owner_changes_mid_period()), "test")
    source.read()
    sample = source.read()
    grid, _ = core_utilizations(sample, None, 2)
    assert grid[0] == pytest.approx(0.1)
    assert sample.engines is not None
    for name, share in ENGINE_SHARE.items():
        assert sample.engines[0][name] == pytest.approx(grid[0] * share)


def test_the_device_figures_keep_the_work_of_a_process_that_exited() -> None:
    first, second = (parsed(s) for s in owner_changes_mid_period())
    period = measure(first, second)
    assert period.seconds == pytest.approx(1.0)
    # the core: 0.4 s by the process that exited + 0.1 s by the new one
    assert period.cores[0].utilization == pytest.approx(0.5)
    assert period.cores[0].engine_utilization("tensor") == pytest.approx(0.25)
    assert period.cores[1].utilization == 0.0
    # the live processes: only the new one, counted from zero
    assert period.live_cores()[0].utilization == pytest.approx(0.1)
    assert list(period.processes) == [200] and period.processes[200].before is None
    assert [p.pid for p in period.exited] == [100]
    assert period.cores[0].flops == 500_000_000_000 and period.live_cores()[0].flops == 100_000_000_000
