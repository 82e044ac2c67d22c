"""``torch_xla.debug.metrics``: the few metrics and counters the emulator has, in torch_xla's
report layout. All of them are simulated: compile and execute times are the cost model's
(docs/cost-model.md), counts are this process's own. Names follow torch_xla's report
(CompileTime, ExecuteTime; CachedCompile, UncachedCompile); nothing else is reported.
"""

from __future__ import annotations

from emulator import xla as _device


def _values() -> tuple[dict[str, tuple[int, float]], dict[str, int]]:
    runtime = _device.active_runtime()
    if runtime is None:
        return {}, {}
    t = runtime.totals
    metrics = {"CompileTime": (t.compiles, t.compile_seconds), "ExecuteTime": (t.executions, t.device_seconds)}
    counters = {"CachedCompile": runtime.cache.counts.hits, "UncachedCompile": runtime.cache.counts.misses}
    return metrics, counters


def metric_names() -> list[str]:
    return list(_values()[0])


def counter_names() -> list[str]:
    return list(_values()[1])


def counter_value(name: str) -> int | None:
    return _values()[1].get(name)


def metrics_report() -> str:
    metrics, counters = _values()
    lines = []
    for name, (samples, seconds) in metrics.items():
        lines += [f"Metric: {name}", f"  TotalSamples: {samples}", f"  Accumulator: {seconds * 1e3:.3f}ms (simulated)"]
    for name, value in counters.items():
        lines += [f"Counter: {name}", f"  Value: {value}"]
    return "\n".join(lines) + ("\n" if lines else "")


def short_metrics_report(counter_names: list[str] | None = None, metric_names: list[str] | None = None) -> str:
    return metrics_report()
