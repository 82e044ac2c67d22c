"""Reports computed from daemon snapshots: every group of docs/reference/neuron-monitor.md from hand-made snapshots."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from neurontools.contract.snapshot import SnapshotError, fetch_snapshot, snapshot_from_dict
from neurontools.monitor.config import default_config, parse_config
from neurontools.report import groups
from neurontools.report.builder import ReportBuilder, build_report
from neurontools.report.encoding import encode_report
from tests.monitor_configs import monitor_config
from tests.snapshots import later, recorded
from tests.snapshots import parsed as snap

FIXTURES = Path(__file__).parent / "fixtures" / "report"

SPEC_CONFIG = monitor_config("1s", hw_counters_period="2s")  # the reference example


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


PREV = recorded("trn1_2xlarge_train_prev")
CUR = recorded("trn1_2xlarge_train_cur")


def config(data: dict[str, Any] | None = None):
    return parse_config(json.dumps(SPEC_CONFIG if data is None else data))


def ordered(text: str) -> Any:
    """JSON with objects as lists of pairs, so comparisons see key order."""
    return json.loads(text, object_pairs_hook=list)


# -- the constructed reference report (docs/reference/neuron-monitor.md §Reference reports) -------------


def spec_report_as_computed() -> dict[str, Any]:
    """The constructed reference report with what a real two-snapshot computation gives differently.

    Every group collected at one wake-up covers the same period (1 s here); the fixture's average
    idle (82.73) is a constructed 100 - user - system, the mean of the per-vCPU rows is 82.72.
    """
    report = load("spec_illustrative_report")
    for entry in report["neuron_runtime_data"]:
        for group in entry["report"].values():
            group["period"] = 1.0
    for group in report["system_data"].values():
        group["period"] = 1.0
    report["system_data"]["vcpu_usage"]["average_usage"]["idle"] = 82.72
    return report


def test_illustrative_report_reproduced_from_two_snapshots() -> None:
    report = build_report(snap(PREV), snap(CUR), config())
    assert ordered(encode_report(report)) == ordered(encode_report(spec_report_as_computed()))


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return [(k, _shape(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [_shape(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return type(value).__name__
    return "number"


def test_illustrative_report_keys_order_and_types() -> None:
    report = build_report(snap(PREV), snap(CUR), config())
    assert _shape(report) == _shape(spec_report_as_computed())
    assert list(report) == ["neuron_runtime_data", "system_data", "instance_info", "neuron_hardware_info"]
    entry = report["neuron_runtime_data"][0]
    assert list(entry) == ["pid", "neuron_runtime_tag", "error", "report"]
    assert list(entry["report"]) == [
        "execution_stats",
        "memory_used",
        "neuron_runtime_vcpu_usage",
        "neuroncore_counters",
    ]
    assert list(report["system_data"]) == ["memory_info", "neuron_hw_counters", "vcpu_usage"]
    for group in [*entry["report"].values(), *report["system_data"].values()]:
        keys = list(group)
        assert keys[0] == "period" and keys[-1] == "error"
        assert isinstance(group["period"], float) and group["error"] == ""

    cores = entry["report"]["neuroncore_counters"]["neuroncores_in_use"]
    assert cores["0"]["neuroncore_utilization"] == 87.42  # busy 0.8742 s over 1.0 s, not rounded
    assert cores["1"]["neuroncore_utilization"] == 86.97
    assert all(type(c["flops"]) is int and type(c["neuroncore_utilization"]) is float for c in cores.values())
    stats = entry["report"]["execution_stats"]
    assert all(type(v) is int for v in [*stats["error_summary"].values(), *stats["execution_summary"].values()])
    assert all(type(v) is float for lat in stats["latency_stats"].values() for v in lat.values())
    used = entry["report"]["memory_used"]["neuron_runtime_used_bytes"]
    assert type(used["host"]) is int and type(used["neuron_device"]) is int
    vcpu = report["system_data"]["vcpu_usage"]
    assert all(type(v) is float for row in vcpu["usage_data"].values() for v in row.values())
    assert type(vcpu["context_switch_count"]) is int
    assert all(
        type(v) is int for dev in report["system_data"]["neuron_hw_counters"]["neuron_devices"] for v in dev.values()
    )


# -- first report, periods, group selection --------------------------------------------------------


def test_first_report_has_gauges_only_with_period_zero() -> None:
    report = build_report(None, snap(CUR), config())
    entry = report["neuron_runtime_data"][0]
    assert list(entry["report"]) == ["memory_used"]
    assert entry["report"]["memory_used"]["period"] == 0.0
    assert list(report["system_data"]) == ["memory_info"]
    assert encode_report(report["system_data"]).startswith('{"memory_info":{"period":0,"memory_total_bytes":')
    assert report["neuron_hardware_info"]["error"] == ""


def test_period_is_the_daemon_monotonic_difference_rounded_to_nanoseconds() -> None:
    cur = copy.deepcopy(CUR)
    cur["monotonic"] = PREV["monotonic"] + 1.0001131823
    report = build_report(snap(PREV), snap(cur), config())
    assert report["system_data"]["memory_info"]["period"] == 1.000113182
    assert '"period":1.000113182,' in encode_report(report)


def test_default_config_without_hw_counters() -> None:
    report = build_report(snap(PREV), snap(CUR), default_config())
    assert list(report["system_data"]) == ["memory_info", "vcpu_usage"]
    assert len(report["neuron_runtime_data"][0]["report"]) == 4


def test_only_configured_groups_are_reported() -> None:
    cfg = config({"system_metrics": [{"type": "memory_info"}]})
    report = build_report(snap(PREV), snap(CUR), cfg)
    assert report["neuron_runtime_data"] == []
    assert list(report["system_data"]) == ["memory_info"]
    assert encode_report(report).startswith('{"neuron_runtime_data":[],"system_data":{"memory_info":')
    cfg = config({"neuron_runtimes": [{"metrics": [{"type": "neuroncore_counters"}]}]})
    report = build_report(snap(PREV), snap(CUR), cfg)
    assert report["system_data"] == {}
    assert list(report["neuron_runtime_data"][0]["report"]) == ["neuroncore_counters"]


def test_groups_due_selects_groups() -> None:
    cfg = config()
    due = {(None, "vcpu_usage"), (0, "memory_used")}
    report = build_report(snap(PREV), snap(CUR), cfg, groups_due=due)
    assert list(report["system_data"]) == ["vcpu_usage"]
    assert list(report["neuron_runtime_data"][0]["report"]) == ["memory_used"]


def test_each_group_keeps_its_own_period_and_latest_data() -> None:
    cfg = config()
    periods = cfg.periods()
    assert periods[(None, "neuron_hw_counters")] == 2.0 and periods[(None, "vcpu_usage")] == 1.0
    builder = ReportBuilder(cfg)
    s0 = copy.deepcopy(PREV)
    s1 = later(s0, 1.0)
    s2 = later(s1, 1.0)
    for i in range(8):
        s1["host"]["vcpus"][i]["idle"] += 1.0
        s2["host"]["vcpus"][i]["idle"] += 2.0
    s1["hardware_counters"][0]["mem_ecc_corrected"] = 3
    s2["hardware_counters"][0]["mem_ecc_corrected"] = 5
    every_second = [k for k in cfg.group_keys() if periods[k] == 1.0]

    first = builder.update(snap(s0))
    assert "neuron_hw_counters" not in first["system_data"]
    second = builder.update(snap(s1), every_second)
    assert "neuron_hw_counters" not in second["system_data"]  # not collected twice yet
    assert second["system_data"]["vcpu_usage"]["period"] == 1.0
    third = builder.update(snap(s2), cfg.group_keys())
    hw = third["system_data"]["neuron_hw_counters"]
    assert hw["period"] == 2.0  # since its own previous collection at s0
    assert hw["neuron_devices"][0]["mem_ecc_corrected"] == 5
    assert third["system_data"]["vcpu_usage"]["period"] == 1.0
    fourth = builder.update(snap(later(s2, 1.0)), every_second)
    assert fourth["system_data"]["neuron_hw_counters"] is hw  # latest data of a group not due


# -- application groups ---------------------------------------------------------------------------


def runtime(report: dict[str, Any], pid: int = 4242) -> dict[str, Any]:
    return next(e for e in report["neuron_runtime_data"] if e["pid"] == pid)["report"]


def test_idle_owned_cores_are_reported_with_zero() -> None:
    prev, cur = copy.deepcopy(PREV), copy.deepcopy(CUR)
    for data in (prev, cur):
        proc = data["processes"][0]
        proc["neuroncores"] = [0, 1, 2, 10]
        proc["cores"]["2"] = {"busy": 0.0, "flops": 0}
    cur["processes"][0]["cores"]["2"]["busy"] = 0.0
    cores = runtime(build_report(snap(prev), snap(cur), config()))["neuroncore_counters"]["neuroncores_in_use"]
    assert list(cores) == ["0", "1", "2", "10"]
    assert cores["2"] == {"neuroncore_utilization": 0.0, "flops": 0}
    assert cores["10"] == {"neuroncore_utilization": 0.0, "flops": 0}  # owned, no counters yet
    assert '"2":{"neuroncore_utilization":0,"flops":0}' in encode_report(cores)


def test_utilization_is_not_rounded_and_flops_truncated() -> None:
    prev, cur = copy.deepcopy(PREV), copy.deepcopy(CUR)
    cur["monotonic"] = prev["monotonic"] + 3.0
    cur["processes"][0]["cores"]["0"]["busy"] = prev["processes"][0]["cores"]["0"]["busy"] + 2.0
    cur["processes"][0]["cores"]["0"]["flops"] = prev["processes"][0]["cores"]["0"]["flops"] + 1000
    core = runtime(build_report(snap(prev), snap(cur), config()))["neuroncore_counters"]["neuroncores_in_use"]["0"]
    assert core["neuroncore_utilization"] == 2.0 / 3.0 * 100
    assert core["flops"] == 333


def test_counts_are_per_period_and_survive_a_counter_reset() -> None:
    prev, cur = copy.deepcopy(PREV), copy.deepcopy(CUR)
    prev["processes"][0]["errors"]["numerical"] = 4
    cur["processes"][0]["errors"]["numerical"] = 7
    cur["processes"][0]["executions"]["completed_with_num_err"] = 3
    prev["processes"][0]["executions"]["timed_out"] = 9
    cur["processes"][0]["executions"]["timed_out"] = 2  # went backwards: restarted from zero
    stats = runtime(build_report(snap(prev), snap(cur), config()))["execution_stats"]
    assert stats["error_summary"] == {
        "generic": 0,
        "numerical": 3,
        "transient": 0,
        "model": 0,
        "runtime": 0,
        "hardware": 0,
    }
    assert stats["execution_summary"]["completed"] == 12
    assert stats["execution_summary"]["completed_with_num_err"] == 3
    assert stats["execution_summary"]["timed_out"] == 2


def test_latency_percentiles_cover_executions_ending_in_the_period() -> None:
    prev, cur = copy.deepcopy(PREV), copy.deepcopy(CUR)
    # ended exactly at the previous snapshot: belongs to the previous period; after cur: to the next
    cur["processes"][0]["latencies"] = [[5000.0, 9.0, 9.0], [5000.5, 0.2, 0.1], [5001.0, 0.4, 0.3], [5001.2, 7.0, 7.0]]
    lat = runtime(build_report(snap(prev), snap(cur), config()))["execution_stats"]["latency_stats"]
    assert list(lat["total_latency"]) == ["p0", "p1", "p100", "p25", "p50", "p75", "p99"]
    assert lat["total_latency"] == {"p0": 0.2, "p1": 0.2, "p100": 0.4, "p25": 0.2, "p50": 0.2, "p75": 0.4, "p99": 0.4}
    assert lat["device_latency"]["p100"] == 0.3


def test_latencies_since_is_the_oldest_last_collection_of_any_group() -> None:
    cfg = config()  # neuron_hw_counters every 2 s, everything else every second
    periods = cfg.periods()
    every_second = [k for k in cfg.group_keys() if periods[k] == 1.0]
    builder = ReportBuilder(cfg)
    assert builder.latencies_since() is None  # nothing collected: every execution may matter
    s0 = copy.deepcopy(PREV)
    builder.update(snap(s0), every_second)
    assert builder.latencies_since() is None  # neuron_hw_counters not collected yet
    builder.update(snap(s0))
    s1 = later(s0, 1.0)
    builder.update(snap(s1), every_second)
    assert builder.latencies_since() == s0["monotonic"]  # the 2 s group still counts from s0
    builder.update(snap(later(s1, 1.0)))
    assert builder.latencies_since() == s1["monotonic"] + 1.0


def test_report_from_a_snapshot_trimmed_to_latencies_since_is_the_same() -> None:
    """What neuron-top, neuron-monitor and neuron-exporter ask the daemon for loses nothing."""
    cur = copy.deepcopy(CUR)
    t0, t1 = PREV["monotonic"], CUR["monotonic"]
    ends = [t0 - 30.0, t0, t0 + 0.5, t1, t1 + 1]
    cur["processes"][0]["latencies"] = [[end, 0.1 * i + 0.1, 0.1 * i] for i, end in enumerate(ends)]
    full = ReportBuilder(config())
    full.update(snap(PREV))
    expected = full.update(snap(cur))
    trimmed_builder = ReportBuilder(config())
    trimmed_builder.update(snap(PREV))
    since = trimmed_builder.latencies_since()
    assert since == PREV["monotonic"]
    trimmed = copy.deepcopy(cur)  # what GET /v1/snapshot?latencies_since= answers (tests/test_daemon.py)
    trimmed["processes"][0]["latencies"] = [lat for lat in cur["processes"][0]["latencies"] if lat[0] > since]
    assert len(trimmed["processes"][0]["latencies"]) == 3
    assert trimmed_builder.update(snap(trimmed)) == expected
    assert runtime(expected)["execution_stats"]["latency_stats"]["total_latency"]["p100"] == 0.4


def test_no_execution_in_the_period_gives_null_latencies() -> None:
    cur = later(PREV)
    stats = runtime(build_report(snap(PREV), snap(cur), config()))["execution_stats"]
    assert stats["latency_stats"] == {"total_latency": None, "device_latency": None}
    assert '"latency_stats":{"total_latency":null,"device_latency":null}' in encode_report(stats)
    assert stats["execution_summary"]["completed"] == 0


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (1, {"p0": 1, "p1": 1, "p100": 1, "p25": 1, "p50": 1, "p75": 1, "p99": 1}),
        (4, {"p0": 1, "p1": 1, "p100": 4, "p25": 1, "p50": 2, "p75": 3, "p99": 4}),
        (12, {"p0": 1, "p1": 1, "p100": 12, "p25": 3, "p50": 6, "p75": 9, "p99": 12}),
        (100, {"p0": 1, "p1": 1, "p100": 100, "p25": 25, "p50": 50, "p75": 75, "p99": 99}),
        (1000, {"p0": 1, "p1": 10, "p100": 1000, "p25": 250, "p50": 500, "p75": 750, "p99": 990}),
    ],
)
def test_nearest_rank_percentiles(n: int, expected: dict[str, int]) -> None:
    values = [float(v) for v in range(n, 0, -1)]  # order of arrival does not matter
    assert groups.percentiles(values) == expected
    assert list(groups.percentiles(values) or {}) == ["p0", "p1", "p100", "p25", "p50", "p75", "p99"]
    assert groups.percentiles([]) is None


def test_memory_used_totals_are_sums_and_cores_in_numeric_order() -> None:
    cur = copy.deepcopy(CUR)
    proc = cur["processes"][0]
    mem = {"constants": 1, "model_code": 2, "model_shared_scratchpad": 3, "runtime_memory": 4, "tensors": 5}
    proc["memory"]["cores"] = {str(c): mem for c in (10, 2, 31, 0, 9)}
    proc["memory"]["host"] = {"application_memory": 100, "constants": 20, "dma_buffers": 3, "tensors": 0}
    used = runtime(build_report(None, snap(cur), config()))["memory_used"]
    assert list(used) == ["period", "neuron_runtime_used_bytes", "loaded_models", "error"]
    total = used["neuron_runtime_used_bytes"]
    assert total["host"] == 123
    assert total["neuron_device"] == 5 * 15
    assert list(total["usage_breakdown"]["neuroncore_memory_usage"]) == ["0", "2", "9", "10", "31"]
    assert list(total["usage_breakdown"]["neuroncore_memory_usage"]["2"]) == list(mem)


def test_loaded_models_in_canonical_key_order() -> None:
    cur = copy.deepcopy(CUR)
    model = cur["processes"][0]["loaded_models"][0]
    shuffled = {k: model[k] for k in ("subgraphs", "is_running", "uuid", "model_id", "name")}
    shuffled["subgraphs"] = {"sg_01": model["subgraphs"]["sg_00"], "sg_00": model["subgraphs"]["sg_00"]}
    cur["processes"][0]["loaded_models"] = [shuffled]
    (out,) = runtime(build_report(None, snap(cur), config()))["memory_used"]["loaded_models"]
    assert list(out) == ["name", "uuid", "model_id", "is_running", "subgraphs"]
    assert list(out["subgraphs"]) == ["sg_00", "sg_01"]
    sg = out["subgraphs"]["sg_00"]
    assert list(sg) == ["memory_used_bytes", "neuroncore_index", "neuron_device_index"]
    assert list(sg["memory_used_bytes"]["usage_breakdown"]["neuron_device"]) == [
        "constants",
        "model_code",
        "runtime_memory",
        "tensors",
    ]


def test_runtime_vcpu_usage_math() -> None:
    prev, cur = copy.deepcopy(PREV), copy.deepcopy(CUR)
    cur["monotonic"] = prev["monotonic"] + 2.0
    cur["processes"][0]["cpu"] = {"user": 10.0 + 3.0, "system": 1.0 + 0.00125}  # 150 %, 0.0625 %
    usage = runtime(build_report(snap(prev), snap(cur), config()))["neuron_runtime_vcpu_usage"]
    assert usage == {"period": 2.0, "vcpu_usage": {"user": 150.0, "system": 0.06}, "error": ""}


def test_unreadable_process_cpu_reports_the_daemon_error() -> None:
    cur = copy.deepcopy(CUR)
    cur["processes"][0]["cpu"] = None
    cur["processes"][0]["cpu_error"] = "open /proc/4242/stat: no such file or directory"
    usage = runtime(build_report(snap(PREV), snap(cur), config()))["neuron_runtime_vcpu_usage"]
    assert usage == {
        "period": 1.0,
        "vcpu_usage": {"user": 0.0, "system": 0.0},
        "error": "open /proc/4242/stat: no such file or directory",
    }


def test_process_new_since_the_baseline() -> None:
    prev = copy.deepcopy(PREV)
    prev["processes"] = [p for p in prev["processes"] if p["pid"] != 4242]
    report = runtime(build_report(snap(prev), snap(CUR), config()))
    # device counters start at zero when a process attaches: everything counted is in the period
    assert report["execution_stats"]["execution_summary"]["completed"] == 112
    assert report["neuroncore_counters"]["neuroncores_in_use"]["0"]["neuroncore_utilization"] == 0.9992 / 1.0 * 100
    # CPU times count from the OS process start: no baseline, the group waits for the next period
    assert "neuron_runtime_vcpu_usage" not in report
    assert list(report) == ["execution_stats", "memory_used", "neuroncore_counters"]


def test_exited_processes_disappear_and_tools_are_never_listed() -> None:
    cur = copy.deepcopy(CUR)
    cur["processes"] = [p for p in cur["processes"] if p["kind"] == "tool"]
    report = build_report(snap(PREV), snap(cur), config())
    assert report["neuron_runtime_data"] == []
    assert encode_report(report).startswith('{"neuron_runtime_data":[],')


def _with_process(data: dict[str, Any], pid: int, tag: str) -> dict[str, Any]:
    data = copy.deepcopy(data)
    proc = copy.deepcopy(data["processes"][0])
    proc["pid"], proc["tag"] = pid, tag
    data["processes"].append(proc)
    return data


def test_tag_filter_selects_processes() -> None:
    prev = _with_process(_with_process(PREV, 5000, "train-llama"), 6000, "eval")
    cur = _with_process(_with_process(CUR, 5000, "train-llama"), 6000, "eval")
    cfg = config({"neuron_runtimes": [{"tag_filter": "^train", "metrics": [{"type": "memory_used"}]}]})
    report = build_report(snap(prev), snap(cur), cfg)
    assert [(e["pid"], e["neuron_runtime_tag"]) for e in report["neuron_runtime_data"]] == [(5000, "train-llama")]
    cfg = config({"neuron_runtimes": [{"tag_filter": "ev|42", "metrics": [{"type": "memory_used"}]}]})
    report = build_report(snap(prev), snap(cur), cfg)
    assert [e["pid"] for e in report["neuron_runtime_data"]] == [4242, 6000]  # unanchored search, daemon order


def test_first_matching_runtime_entry_wins() -> None:
    prev = _with_process(PREV, 5000, "train-llama")
    cur = _with_process(CUR, 5000, "train-llama")
    cfg = config(
        {
            "neuron_runtimes": [
                {"tag_filter": "^train", "metrics": [{"type": "neuroncore_counters"}]},
                {"metrics": [{"type": "memory_used"}, {"type": "neuroncore_counters"}]},
            ]
        }
    )
    report = build_report(snap(prev), snap(cur), cfg)
    assert list(runtime(report, 5000)) == ["neuroncore_counters"]
    assert list(runtime(report, 4242)) == ["memory_used", "neuroncore_counters"]


# -- system groups --------------------------------------------------------------------------------


def test_vcpu_usage_math() -> None:
    prev, cur = copy.deepcopy(PREV), copy.deepcopy(PREV)
    cur["monotonic"] += 1.0
    cur["host"]["vcpus"] = [dict(v) for v in prev["host"]["vcpus"][:2]]
    prev["host"]["vcpus"] = prev["host"]["vcpus"][:2]
    deltas = [
        {"user": 0.3, "nice": 0.01, "system": 0.2, "idle": 0.45, "io_wait": 0.02, "irq": 0.005, "soft_irq": 0.015},
        {"user": 0.0, "nice": 0.0, "system": 0.0, "idle": 1.0, "io_wait": 0.0, "irq": 0.0, "soft_irq": 0.0},
    ]
    for row, delta in zip(cur["host"]["vcpus"], deltas, strict=True):
        for k, v in delta.items():
            row[k] += v
    cur["host"]["context_switches"] = prev["host"]["context_switches"] + 777
    cfg = config({"system_metrics": [{"type": "vcpu_usage"}]})
    vcpu = build_report(snap(prev), snap(cur), cfg)["system_data"]["vcpu_usage"]
    assert list(vcpu) == ["period", "average_usage", "usage_data", "context_switch_count", "error"]
    assert vcpu["usage_data"]["0"] == {
        "user": 30.0,
        "nice": 1.0,
        "system": 20.0,
        "idle": 45.0,
        "io_wait": 2.0,
        "irq": 0.5,
        "soft_irq": 1.5,
    }
    assert vcpu["usage_data"]["1"]["idle"] == 100.0
    assert vcpu["average_usage"] == {
        "user": 15.0,
        "nice": 0.5,
        "system": 10.0,
        "idle": 72.5,
        "io_wait": 1.0,
        "irq": 0.25,
        "soft_irq": 0.75,
    }
    assert vcpu["context_switch_count"] == 777
    for row in [vcpu["average_usage"], *vcpu["usage_data"].values()]:
        assert sum(row.values()) == pytest.approx(100, abs=0.05)


def test_vcpu_rows_of_the_spec_sum_to_about_100() -> None:
    vcpu = build_report(snap(PREV), snap(CUR), config())["system_data"]["vcpu_usage"]
    assert len(vcpu["usage_data"]) == 8
    for row in vcpu["usage_data"].values():
        assert sum(row.values()) == pytest.approx(100, abs=0.02)


def test_cpu_percentages_round_like_go() -> None:
    assert groups.go_round2(0.125) == 0.13  # Go rounds halves away from zero (Python's round gives 0.12)
    assert groups.go_round2(-0.125) == -0.13
    assert groups.go_round2(61.386138613861384) == 61.39
    assert groups.go_round2(99.999) == 100.0


def test_hw_counters_are_per_period_per_device() -> None:
    prev, cur = copy.deepcopy(PREV), copy.deepcopy(CUR)
    names = ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected")
    prev["hardware_counters"] = [{"neuron_device_index": i, **dict.fromkeys(names, 10 * i)} for i in (1, 0)]
    cur["hardware_counters"] = [
        {
            "neuron_device_index": 1,
            "mem_ecc_corrected": 12,
            "mem_ecc_uncorrected": 10,
            "sram_ecc_corrected": 11,
            "sram_ecc_uncorrected": 10,
        },
        {"neuron_device_index": 0, **dict.fromkeys(names, 0)},
    ]
    hw = build_report(snap(prev), snap(cur), config())["system_data"]["neuron_hw_counters"]
    assert hw["neuron_devices"] == [
        {
            "neuron_device_index": 0,
            "mem_ecc_corrected": 0,
            "mem_ecc_uncorrected": 0,
            "sram_ecc_uncorrected": 0,
            "sram_ecc_corrected": 0,
        },
        {
            "neuron_device_index": 1,
            "mem_ecc_corrected": 2,
            "mem_ecc_uncorrected": 0,
            "sram_ecc_uncorrected": 0,
            "sram_ecc_corrected": 1,
        },
    ]
    assert list(hw["neuron_devices"][0]) == [
        "neuron_device_index",
        "mem_ecc_corrected",
        "mem_ecc_uncorrected",
        "sram_ecc_uncorrected",
        "sram_ecc_corrected",
    ]


def test_memory_info_and_always_present_objects() -> None:
    report = build_report(snap(PREV), snap(CUR), config({}))
    assert report["system_data"] == {} and report["neuron_runtime_data"] == []
    assert report["instance_info"]["instance_type"] == "trn1.2xlarge"
    assert list(report["instance_info"])[-1] == "error"
    assert list(report["neuron_hardware_info"]) == [
        "neuron_device_type",
        "neuron_device_version",
        "neuroncore_version",
        "neuron_device_count",
        "neuron_device_memory_size",
        "neuroncore_per_device_count",
        "logical_neuroncore_config",
        "error",
    ]


# -- daemon outage ---------------------------------------------------------------------------------


def test_daemon_outage_and_recovery() -> None:
    cfg = config()
    builder = ReportBuilder(cfg)
    builder.update(snap(PREV))
    builder.update(snap(CUR))
    down = builder.update_unavailable("no Neuron emulator daemon at /tmp/x.sock (connection refused)", None)
    assert down["neuron_runtime_data"] == []
    assert down["neuron_hardware_info"]["error"].startswith("no Neuron emulator daemon")
    assert down["neuron_hardware_info"]["neuron_device_count"] == 0
    assert down["instance_info"]["instance_id"] == "i-0123456789abcdef0" and down["instance_info"]["error"] == ""
    assert list(down["system_data"]) == ["memory_info", "neuron_hw_counters", "vcpu_usage"]
    for group in down["system_data"].values():
        assert group["error"].startswith("no Neuron emulator daemon") and group["period"] == 0.0
    assert down["system_data"]["memory_info"]["memory_total_bytes"] == 0
    assert list(down["system_data"]["vcpu_usage"]) == list(
        build_report(snap(PREV), snap(CUR), cfg)["system_data"]["vcpu_usage"]
    )
    back = builder.update(snap(later(CUR, 3.0)))
    assert back["neuron_hardware_info"]["error"] == ""
    assert back["system_data"]["vcpu_usage"]["period"] == 3.0  # the baseline survived the outage
    assert runtime(back)["neuroncore_counters"]["period"] == 3.0


# -- snapshot parsing -----------------------------------------------------------------------------


def test_snapshot_parse_types() -> None:
    s = snap(CUR)
    assert s.monotonic == 5001.0 and s.hardware.neuron_device_count == 1
    proc = s.process(4242)
    assert proc is not None and proc.is_runtime and proc.neuroncores == (0, 1)
    assert proc.cores[0].flops == 1000000000000 + 41285734118912
    assert proc.compile_cache.hits == 40 and proc.collectives.efa.bytes == 0
    tool = s.process(5151)
    assert tool is not None and not tool.is_runtime and tool.cores == {}
    assert [p.pid for p in s.runtime_processes] == [4242]


def test_snapshot_optional_and_integral_float_fields() -> None:
    data = copy.deepcopy(CUR)
    proc = data["processes"][0]
    for key in ("compile_cache", "collectives", "cpu_error", "command", "runtime_version"):
        del proc[key]
    proc["cores"]["0"]["flops"] = 5.0
    del proc["cores"]["0"]["engines"]
    s = snap(data)
    assert s.processes[0].cores[0].flops == 5 and type(s.processes[0].cores[0].flops) is int


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("monotonic"), "snapshot: missing key 'monotonic'"),
        (lambda d: d.update(processes={}), "snapshot.processes: expected an array, got an object"),
        (
            lambda d: d["processes"][0]["cores"]["1"].update(busy="x"),
            "snapshot.processes[0].cores['1'].busy: expected a number, got 'x'",
        ),
        (
            lambda d: d["processes"][0]["cores"]["0"].update(flops=1.5),
            "snapshot.processes[0].cores['0'].flops: expected an integer, got 1.5",
        ),
        (
            lambda d: d["processes"][0]["cores"].update(x={}),
            "snapshot.processes[0].cores: key 'x' is not a NeuronCore index",
        ),
        (
            lambda d: d["processes"][0].update(kind="daemon"),
            "snapshot.processes[0].kind: expected one of runtime, tool, got 'daemon'",
        ),
        (
            lambda d: d["processes"][0]["executions"].pop("timed_out"),
            "snapshot.processes[0].executions: missing key 'timed_out'",
        ),
        (
            lambda d: d["processes"][0]["latencies"].append([1.0, 2.0]),
            "snapshot.processes[0].latencies[15]: expected [end, total, device], got an array",
        ),
        (lambda d: d["processes"][0].update(pid=True), "snapshot.processes[0].pid: expected an integer, got True"),
        (lambda d: d["host"]["vcpus"][3].pop("soft_irq"), "snapshot.host.vcpus[3]: missing key 'soft_irq'"),
        (
            lambda d: d["hardware"].update(neuron_device_count="1"),
            "snapshot.hardware.neuron_device_count: expected an integer, got '1'",
        ),
        (lambda d: d["instance"].pop("ami_id"), "snapshot.instance: missing key 'ami_id'"),
        (
            lambda d: d["processes"][0]["loaded_models"][1]["subgraphs"]["sg_00"].pop("neuroncore_index"),
            "snapshot.processes[0].loaded_models[1].subgraphs['sg_00']: missing key 'neuroncore_index'",
        ),
        (
            lambda d: d["hardware_counters"][0].pop("sram_ecc_corrected"),
            "snapshot.hardware_counters[0]: missing key 'sram_ecc_corrected'",
        ),
    ],
)
def test_snapshot_errors_name_the_bad_key(mutate: Any, message: str) -> None:
    data = copy.deepcopy(CUR)
    mutate(data)
    with pytest.raises(SnapshotError) as info:
        snapshot_from_dict(data)
    assert str(info.value) == message


def test_snapshot_must_be_an_object() -> None:
    with pytest.raises(SnapshotError, match="snapshot: expected an object, got an array"):
        snapshot_from_dict([])


def test_fetch_snapshot_asks_the_daemon() -> None:
    class Client:
        def __init__(self) -> None:
            self.paths: list[str] = []

        def get(self, path: str) -> Any:
            self.paths.append(path)
            return CUR

    client = Client()
    assert fetch_snapshot(client).monotonic == 5001.0  # type: ignore[arg-type]
    fetch_snapshot(client, 5000.25)  # type: ignore[arg-type]
    assert client.paths == ["/snapshot", "/snapshot?latencies_since=5000.25"]
