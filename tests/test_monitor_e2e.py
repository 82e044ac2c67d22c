"""neuron-monitor against a real daemon and a real training process."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

from tests.monitor_configs import monitor_config
from tests.support import BIN, run_tool, tool_env, wait_until
from tests.test_training_e2e import read_until_done, train

CONFIG = monitor_config("500ms")
APP_GROUPS = ["execution_stats", "memory_used", "neuron_runtime_vcpu_usage", "neuroncore_counters"]


def start_monitor(address: str, tmp: Path, config: dict) -> subprocess.Popen[str]:
    path = tmp / "monitor.json"
    path.write_text(json.dumps(config))
    return subprocess.Popen(
        [str(BIN / "neuron-monitor"), "-c", str(path)],
        env=tool_env(address),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def collect(monitor: subprocess.Popen[str], seconds: float) -> list[dict]:
    """Reports written during the next ``seconds``."""
    assert monitor.stdout is not None
    deadline = time.monotonic() + seconds
    reports = []
    while time.monotonic() < deadline:
        line = monitor.stdout.readline()
        if not line:
            break
        reports.append(json.loads(line))
    return reports


def test_utilization_follows_training_on_the_claimed_core_only(daemon_factory, short_tmp: Path) -> None:
    daemon = daemon_factory("trn1.32xlarge")
    monitor = start_monitor(daemon.address, short_tmp, CONFIG)
    # model-scale steps of ~14 ms device time each: the core is measurably busy
    proc = train(
        daemon.address,
        short_tmp,
        "--meta",
        "--width",
        "4096",
        "--batch",
        "512",
        "--steps",
        "150",
        "--hold",
        env={"NEURON_RT_VISIBLE_CORES": "6-7", "NEURON_PROCESS_TAG": "trainer"},
    )
    try:
        assert wait_until(lambda: any(p["pid"] == proc.pid for p in daemon.processes()), timeout=30)
        ls = run_tool(["neuron-ls", "-a", "-j"], daemon.address)
        tools = [p["command"] for d in json.loads(ls.stdout) for p in d["neuron_processes"]]
        assert any(c.startswith("neuron-monitor -c") for c in tools)  # the monitor holds the devices too
        # reports for as long as it trains (a fixed window can fall before the first step on a
        # loaded machine: tracing and the simulated compile come first)
        trained = threading.Event()
        reader = threading.Thread(target=lambda: (read_until_done(proc), trained.set()), daemon=True)
        reader.start()
        during: list[dict] = []
        deadline = time.monotonic() + 180
        while not trained.is_set() and time.monotonic() < deadline:
            during += collect(monitor, 1.0)
        reader.join(timeout=5)
        assert trained.is_set(), "the training process did not finish its steps"
        time.sleep(1.2)  # training over, the process idles holding its cores
        after = collect(monitor, 1.6)
    finally:
        proc.kill()
        proc.wait()
        monitor.terminate()
        monitor.wait(timeout=10)
    assert monitor.returncode == 0

    def mine(report: dict) -> dict | None:
        return next((e for e in report["neuron_runtime_data"] if e["pid"] == proc.pid), None)

    busy = [m["report"] for r in during if (m := mine(r)) and "neuroncore_counters" in m["report"]]
    assert busy, "no report carried the training process"
    for rep in busy:
        cores = rep["neuroncore_counters"]["neuroncores_in_use"]
        assert set(cores) == {"6", "7"}  # exactly the claimed cores
        assert cores["7"] == {"neuroncore_utilization": 0, "flops": 0}  # claimed, not used
    assert any(rep["neuroncore_counters"]["neuroncores_in_use"]["6"]["neuroncore_utilization"] > 1 for rep in busy)
    assert any(rep["neuroncore_counters"]["neuroncores_in_use"]["6"]["flops"] > 0 for rep in busy)
    assert any(rep["execution_stats"]["execution_summary"]["completed"] > 0 for rep in busy)
    # tag and group layout as the real tool writes them
    entry = next(m for r in during if (m := mine(r)))
    assert entry["neuron_runtime_tag"] == "trainer" and entry["error"] == ""
    entries = [m for m in map(mine, during) if m is not None]
    assert all(list(m["report"]) == sorted(m["report"]) for m in entries)
    assert set(busy[-1]) == set(APP_GROUPS)
    idle = [m["report"] for r in after if (m := mine(r)) and "neuroncore_counters" in m["report"]]
    assert idle
    last = idle[-1]
    assert last["neuroncore_counters"]["neuroncores_in_use"]["6"] == {"neuroncore_utilization": 0, "flops": 0}
    assert last["execution_stats"]["latency_stats"]["total_latency"] is None
    mem = last["memory_used"]["neuron_runtime_used_bytes"]
    assert mem["neuron_device"] == sum(
        sum(c.values()) for c in mem["usage_breakdown"]["neuroncore_memory_usage"].values()
    )
    assert mem["usage_breakdown"]["neuroncore_memory_usage"]["6"]["constants"] == 4 * (
        4096 * 4 * 4096 + 4 * 4096 + 4 * 4096 + 1
    )
    # every line carries the always-present objects and the system groups
    for report in during + after:
        assert list(report)[:4] == ["neuron_runtime_data", "system_data", "instance_info", "neuron_hardware_info"]
        assert report["neuron_hardware_info"]["neuron_device_count"] == 16


def test_monitor_without_config_reports_idle_host(daemon) -> None:
    monitor = subprocess.Popen(
        [str(BIN / "neuron-monitor")], env=tool_env(daemon.address), stdout=subprocess.PIPE, text=True
    )
    try:
        assert monitor.stdout is not None
        first = monitor.stdout.readline()
    finally:
        monitor.terminate()
        monitor.wait(timeout=10)
    report = json.loads(first)
    assert first.startswith('{"neuron_runtime_data":[],"system_data":{"memory_info":{"period":')
    assert report["instance_info"]["instance_type"] == "trn1.2xlarge"
    assert monitor.returncode == 0


def test_monitor_bad_input_is_one_line(daemon, short_tmp: Path) -> None:
    bad = short_tmp / "bad.json"
    bad.write_text('{"period": "1s", "system_metrics": [{"type": "inference_stats"}]}')
    out = run_tool(["neuron-monitor", "-c", str(bad)], daemon.address)
    assert out.returncode == 1 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    missing = run_tool(["neuron-monitor"], str(short_tmp / "none.sock"))
    assert missing.returncode == 1 and "neuron-emulator up" in missing.stderr
