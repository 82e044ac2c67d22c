"""Kubernetes pods on the emulated instance (docs/kubernetes.md), end to end: real training
processes attach with a pod's environment, the daemon's snapshot carries it, neuron-monitor writes
``neuron_k8s_info``, neuron-exporter and neuron-monitor-prometheus label per-core series with
``pod``/``namespace``/``container`` - and nothing changes while the switches are off."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from emulator.runtime.attach import CONTAINER_NAME_ENV, POD_NAME_ENV, POD_NAMESPACE_ENV, pod_from_env
from neurontools.contract.inventory import PodRef
from neurontools.exporter.compat import CompatMetrics
from neurontools.report import k8s
from neurontools.report.builder import build_report
from neurontools.report.monitor_config import MetricGroup, MonitorConfig, default_config
from neurontools.sources.daemon_client import DaemonError
from tests import snapshots
from tests.support import BIN, POD_ENV, Holder, start_holder, tool_env, wait_or_kill, wait_until
from tests.test_exporter_app import Exporter, parse, series, start_exporter
from tests.test_monitor_e2e import start_monitor

K8S_CONFIG = {"period": "500ms", "system_metrics": [{"type": "k8s_info"}, {"type": "memory_info"}]}
POD_LABELS = ("pod", "namespace", "container")


def pod_env(pod: str | None, namespace: str | None = None, container: str | None = None, **more: str) -> dict[str, str]:
    env = dict(more)
    for name, value in ((POD_NAME_ENV, pod), (POD_NAMESPACE_ENV, namespace), (CONTAINER_NAME_ENV, container)):
        if value is not None:
            env[name] = value
    return env


def hold(holders: list[Holder], address: str, cwd: Path, cores: str, **env: str) -> Holder:
    holder = start_holder(address, cwd, {"NEURON_RT_VISIBLE_CORES": cores, **env})
    holders.append(holder)
    assert holder.attached, holder.stderr
    return holder


def next_report(monitor: subprocess.Popen[str], timeout: float = 15.0) -> dict:
    assert monitor.stdout is not None
    line = monitor.stdout.readline()
    assert line, monitor.stderr.read() if monitor.stderr else "monitor exited"
    return json.loads(line)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen]]:
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.terminate()
            wait_or_kill(proc, 10)


# -- the runtime side --------------------------------------------------------------------------------


def test_pod_comes_from_the_downward_api_variables() -> None:
    assert pod_from_env({}) is None
    assert pod_from_env({"POD_NAMESPACE": "ml"}) is None  # no pod name: not a pod
    assert pod_from_env(pod_env("trainer-0", "ml", "train")) == {
        "pod_name": "trainer-0",
        "namespace": "ml",
        "container_name": "train",
    }
    # a pod always has a namespace; without the variable it is Kubernetes' default one
    assert pod_from_env(pod_env("bench")) == {"pod_name": "bench", "namespace": "default", "container_name": ""}
    assert set(POD_ENV) == {POD_NAME_ENV, POD_NAMESPACE_ENV, CONTAINER_NAME_ENV}


def test_daemon_refuses_a_malformed_pod(daemon) -> None:
    body = {"pid": os.getpid(), "command": "pytest", "kind": "runtime", "visible_cores": [0]}
    for pod in (
        {"pod_name": "p", "namespace": "n" * 64, "container_name": "c"},  # namespaces are DNS labels
        {"pod_name": "", "namespace": "ml", "container_name": "c"},
        {"pod_name": "p", "namespace": "ml", "container_name": "c", "uid": "x"},
    ):
        with pytest.raises(DaemonError) as err:
            daemon.client.post("/processes", {**body, "pod": pod})
        assert err.value.status == 422, err.value
    assert daemon.processes() == []


# -- neuron-monitor ------------------------------------------------------------------------------------


def test_monitor_reports_which_pod_holds_each_core_and_device(daemon_factory, short_tmp: Path, holders, procs) -> None:
    daemon = daemon_factory("trn1.32xlarge")
    address = daemon.address
    train = hold(holders, address, short_tmp, "2", **pod_env("trainer-0", "ml", "train"))
    hold(holders, address, short_tmp, "3", **pod_env("trainer-0", "ml", "eval"))
    hold(holders, address, short_tmp, "0", **pod_env("bench-7"))
    hold(holders, address, short_tmp, "4")  # not in a pod: no entry anywhere

    # the daemon's process list carries each process's pod
    pods = {p["neuroncores"][0]: p["pod"] for p in daemon.processes()}
    assert pods == {
        2: {"pod_name": "trainer-0", "namespace": "ml", "container_name": "train"},
        3: {"pod_name": "trainer-0", "namespace": "ml", "container_name": "eval"},
        0: {"pod_name": "bench-7", "namespace": "default", "container_name": ""},
        4: None,
    }

    monitor = start_monitor(address, short_tmp, K8S_CONFIG)
    procs.append(monitor)
    report = next_report(monitor)
    assert list(report) == [
        "neuron_runtime_data",
        "system_data",
        "instance_info",
        "neuron_hardware_info",
        "neuron_k8s_info",
    ]
    assert list(report["system_data"]) == ["memory_info"]  # k8s_info is not a system_data group
    info = report["neuron_k8s_info"]
    assert info == {
        "period": 0,  # a gauge: reported from the first snapshot
        "neuroncores_k8s_info": {
            "0": {"pod_name": "bench-7", "namespace": "default", "container_name": []},
            "2": {"pod_name": "trainer-0", "namespace": "ml", "container_name": ["train"]},
            "3": {"pod_name": "trainer-0", "namespace": "ml", "container_name": ["eval"]},
        },
        "neurondevices_k8s_info": {
            "0": {"pod_name": "bench-7", "namespace": "default", "container_name": []},
            "1": {"pod_name": "trainer-0", "namespace": "ml", "container_name": ["eval", "train"]},
        },
        "error": "",
    }

    # the training container exits: its core leaves the pod's entries within a report or two
    assert train.release() == 0

    def train_gone() -> bool:
        cores = next_report(monitor)["neuron_k8s_info"]["neuroncores_k8s_info"]
        return "2" not in cores

    assert wait_until(train_gone, timeout=10, interval=0)
    latest = next_report(monitor)["neuron_k8s_info"]
    assert latest["period"] > 0
    assert latest["neurondevices_k8s_info"]["1"]["container_name"] == ["eval"]

    # off by default: the same host without a configuration file has no neuron_k8s_info
    default = subprocess.Popen(
        [str(BIN / "neuron-monitor")], env=tool_env(address), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    procs.append(default)
    assert "neuron_k8s_info" not in next_report(default)


# -- the exporters ---------------------------------------------------------------------------------------


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode()


def test_exporters_label_per_core_series_with_the_pod(daemon, short_tmp: Path, holders, procs, exporters) -> None:
    address = daemon.address
    hold(holders, address, short_tmp, "1", **pod_env("trainer-0", "ml", "train"))

    labelled = start_exporter(address, "--interval", "0.2", "--enable-k8s-info")
    plain = start_exporter(address, "--interval", "0.2")
    exporters += [labelled, plain]

    def in_use(exporter: Exporter) -> dict:
        return series(exporter.samples(), "neuroncore_in_use")

    assert wait_until(lambda: len(in_use(labelled)) == 2 and len(in_use(plain)) == 2, timeout=15)
    core = {("neuron_device", "0")}
    assert in_use(labelled) == {
        frozenset({*core, ("neuroncore", "0"), ("pod", ""), ("namespace", ""), ("container", "")}): 0,
        frozenset({*core, ("neuroncore", "1"), ("pod", "trainer-0"), ("namespace", "ml"), ("container", "train")}): 1,
    }
    samples = labelled.samples()
    for family in ("neuroncore_busy_seconds_total", "neuroncore_flops_total", "neuroncore_engine_busy_seconds_total"):
        for labels in series(samples, family):
            names = dict(labels)
            assert names["pod"] == ("trainer-0" if names["neuroncore"] == "1" else ""), (family, names)
    # device-level and host-level families keep their labels
    assert all("pod" not in dict(labels) for labels in series(samples, "neurondevice_hbm_total_bytes"))

    # without the flag: exactly the labels of before
    for labels in in_use(plain):
        assert {name for name, _ in labels} == {"neuron_device", "neuroncore"}
    assert "pod=" not in plain.scrape()

    # neuron-monitor | neuron-monitor-prometheus --enable-k8s-info: the compatible per-core families
    config = short_tmp / "k8s-monitor.json"
    config.write_text(json.dumps({**K8S_CONFIG, "neuron_runtimes": [{"metrics": [{"type": "memory_used"}]}]}))
    monitor = subprocess.Popen(
        [str(BIN / "neuron-monitor"), "-c", str(config)],
        env=tool_env(address),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    procs.append(monitor)
    compat = subprocess.Popen(
        [str(BIN / "neuron-monitor-prometheus"), "--enable-k8s-info", "--bind", "127.0.0.1", "-p", "0"],
        env=tool_env(address),
        stdin=monitor.stdout,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    procs.append(compat)
    assert monitor.stdout is not None and compat.stdout is not None
    monitor.stdout.close()  # the pipe belongs to the two processes now
    first = compat.stdout.readline()
    found = re.fullmatch(r"Running HTTP prometheus server at port (\d+)\n", first)
    assert found, first
    url = f"http://127.0.0.1:{found.group(1)}/metrics"

    def tensors() -> dict:
        return series(parse(_scrape(url)), "neuroncore_memory_usage_tensors")

    assert wait_until(lambda: len(tensors()) == 1, timeout=15)
    (labels,) = tensors()
    names = dict(labels)
    assert [names[k] for k in ("neuroncore", *POD_LABELS)] == ["1", "trainer-0", "ml", "train"]
    compat.terminate()
    assert compat.wait(timeout=10) == 0
    assert "Traceback" not in compat.stderr.read()


# -- the derivation (report.k8s) on hand-made snapshots ------------------------------------------------


def _snapshot(*owners: tuple[int, PodRef | None]) -> dict:
    processes = [
        dataclasses.replace(snapshots.runtime_process(pid, cores=[core], busy={core: 0.0}, flops={core: 0}), pod=pod)
        for pid, (core, pod) in enumerate(owners, start=100)
    ]
    return snapshots.snapshot(
        time=1.0,
        monotonic=1.0,
        instance=snapshots.instance("trn1.32xlarge", "i-0123456789abcdef0"),
        hardware=snapshots.trn1_hardware(16),
        processes=processes,
        vcpus=[dict.fromkeys(("user", "nice", "system", "idle", "io_wait", "irq", "soft_irq"), 1.0)],
    )


def test_device_shared_by_two_pods_names_the_pod_of_its_lowest_core() -> None:
    a, b = PodRef("a-0", "team-a", "main"), PodRef("b-0", "team-b", "main")
    data = _snapshot((31, b), (30, a), (5, None))
    snap = snapshots.parsed(data)
    assert data["processes"][0]["pod"] == {"pod_name": "b-0", "namespace": "team-b", "container_name": "main"}
    assert data["processes"][2]["pod"] is None
    assert k8s.device_uses(snap) == {15: k8s.PodUse("a-0", "team-a", ("main",))}
    assert list(k8s.core_uses(snap)) == [30, 31]
    assert k8s.core_labels(snap) == {30: ("a-0", "team-a", "main"), 31: ("b-0", "team-b", "main")}
    assert k8s.core_labels(None) == {}

    config = MonitorConfig(period=1.0, system_metrics=(MetricGroup("k8s_info", 1.0),))
    report = build_report(None, snap, config)
    assert report["neuron_k8s_info"]["neuroncores_k8s_info"]["31"]["namespace"] == "team-b"
    assert "neuron_k8s_info" not in build_report(None, snap, MonitorConfig(period=1.0))


def test_compat_without_k8s_info_in_the_report_labels_empty() -> None:
    snap = snapshots.parsed(snapshots.recorded("trn1_2xlarge_train_cur"))
    built = build_report(None, snap, default_config())  # memory_used only, no neuron_k8s_info
    metrics = CompatMetrics(k8s_info=True)
    assert metrics.update(built) == []
    registry = CollectorRegistry()
    registry.register(metrics)
    tensors = series(parse(generate_latest(registry).decode()), "neuroncore_memory_usage_tensors")
    assert tensors and all(dict(labels)["pod"] == dict(labels)["container"] == "" for labels in tensors)

    broken = dict(built, neuron_k8s_info={"period": 0, "error": "no kubelet"})
    assert CompatMetrics(k8s_info=True).update(broken) == ["Error getting neuron_k8s_info: no kubelet"]
    use = {"pod_name": "p", "namespace": "n", "container_name": ["c"]}
    bad = dict(built, neuron_k8s_info={"period": 0, "neuroncores_k8s_info": {"x": use}, "error": ""})
    assert CompatMetrics(k8s_info=True).update(bad) == ["Invalid neuron_k8s_info: expected an integer index, got 'x'"]
    bad = dict(built, neuron_k8s_info={"period": 0, "neuroncores_k8s_info": {"0": {"pod_name": "p"}}, "error": ""})
    assert CompatMetrics(k8s_info=True).update(bad) == ["Invalid neuron_k8s_info: missing key 'namespace'"]
    # without the flag the object is ignored, as every unknown part of a report
    assert CompatMetrics().update(bad) == []
