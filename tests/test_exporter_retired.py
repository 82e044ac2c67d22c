"""Work of processes that exit between two collections still reaches the node counters."""

from __future__ import annotations

from pathlib import Path

from tests.support import wait_until
from tests.test_exporter_app import start_exporter
from tests.test_training_e2e import lines, mlp_flops, train


def test_short_lived_processes_are_counted_in_full(daemon, short_tmp: Path) -> None:
    exporter = start_exporter(daemon.address, "--interval", "1")
    try:
        check_counts(exporter, short_tmp, daemon.address)
    finally:
        exporter.stop()


def check_counts(exporter, short_tmp: Path, address: str) -> None:
    steps = 0
    for _ in range(2):  # each run ends well within one collection interval of its last step
        out = [s for s in lines(train(address, short_tmp, "--steps", "15")) if "step" in s]
        steps += len(out)

    def settled() -> bool:
        samples = exporter.samples()
        return samples.get(("neuron_executions_total", frozenset({("outcome", "completed")}))) == steps

    assert wait_until(settled, timeout=10, interval=0.5)
    samples = exporter.samples()
    flops = samples[("neuroncore_flops_total", frozenset({("neuron_device", "0"), ("neuroncore", "0")}))]
    assert flops == steps * mlp_flops(32, 64)
    assert samples[("neuron_execution_latency_seconds_count", frozenset())] == steps
    assert (
        samples[("neuron_compile_cache_misses_total", frozenset())]
        + samples[("neuron_compile_cache_hits_total", frozenset())]
        == steps
    )
