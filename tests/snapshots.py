"""Daemon snapshots (``GET /v1/snapshot``, docs/snapshot.md) for every test, made one way.

Hand-made snapshots are built from the snapshot's own models (neurontools/contract/snapshot_models.py)
and written by its serialiser, so a fake daemon answers exactly the JSON the real one writes;
recorded ones are the JSON fixtures of tests/fixtures/report/. Every function returns a fresh
decoded-JSON dict a test may change, except ``parsed`` (the tools' typed view of one).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from neurontools.contract import snapshot_models
from neurontools.contract.inventory import HardwareInfo, InstanceIdentity
from neurontools.contract.schema import CORE_MEMORY_KEYS, ERROR_SUMMARY_KEYS, EXECUTION_SUMMARY_KEYS, HW_COUNTER_KEYS
from neurontools.contract.snapshot import SNAPSHOT, snapshot_from_dict

FIXTURES = Path(__file__).parent / "fixtures" / "report"
MB = 1024 * 1024

# a training process's host memory (docs/snapshot.md's example)
HOST_MEMORY = {"application_memory": 2048 * MB, "constants": 0, "dma_buffers": 16 * MB, "tensors": 4 * MB}


# -- recorded -------------------------------------------------------------------------------------


@cache
def _recorded(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


def recorded(name: str) -> dict[str, Any]:
    """A recorded snapshot of tests/fixtures/report/ (``trn1_2xlarge_train_prev``, ``..._cur``:
    a trn1.2xlarge training, one second apart), as the daemon's JSON decodes."""
    return copy.deepcopy(_recorded(name))


def parsed(data: Any) -> snapshot_models.Snapshot:
    """The tools' view of a snapshot (validated: a malformed one raises ``SnapshotError``)."""
    return snapshot_from_dict(data)


def later(
    data: Mapping[str, Any],
    seconds: float = 1.0,
    *,
    busy: Mapping[int, float] | None = None,
    completed: float = 0.0,
    vcpu: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """A copy of ``data`` taken ``seconds`` later: both clocks move on; per second, every runtime
    process's core ``c`` is busy ``busy[c]`` s and completes ``completed`` executions, and every
    vCPU spends ``vcpu[state]`` s in each state. Nothing else changes."""
    out = copy.deepcopy(dict(data))
    out["monotonic"] += seconds
    out["time"] += seconds
    for proc in out["processes"]:
        if proc["kind"] != "runtime":
            continue
        for core, share in (busy or {}).items():
            proc["cores"][str(core)]["busy"] += share * seconds
        if completed:
            proc["executions"]["completed"] += int(completed * seconds)
    for row in out["host"]["vcpus"]:
        for state, share in (vcpu or {}).items():
            row[state] += share * seconds
    return out


# -- hand-made ------------------------------------------------------------------------------------


def loaded_model(
    *,
    name: str,
    uuid: str,
    model_id: int,
    core: int,
    per_device: int,
    device: Mapping[str, int],
    host: Mapping[str, int],
) -> snapshot_models.LoadedModel:
    """A model loaded on global NeuronCore ``core`` (one subgraph, ``sg_00``): its load-time device
    memory by category (``constants``, ``model_code``, ``runtime_memory``, ``tensors``) and host memory."""
    breakdown = snapshot_models.SubgraphBreakdown(
        host=snapshot_models.HostMemoryUsage(**host), neuron_device=snapshot_models.SubgraphDeviceMemory(**device)
    )
    subgraph = snapshot_models.Subgraph(
        memory_used_bytes=snapshot_models.SubgraphMemory(
            host=sum(host.values()), neuron_device=sum(device.values()), usage_breakdown=breakdown
        ),
        neuroncore_index=core % per_device,
        neuron_device_index=core // per_device,
    )
    return snapshot_models.LoadedModel(
        name=name, uuid=uuid, model_id=model_id, is_running=True, subgraphs={"sg_00": subgraph}
    )


def runtime_process(
    pid: int,
    *,
    tag: str | None = None,
    command: str = "",
    runtime_version: str = "2.29.14",
    cores: Sequence[int],
    busy: Mapping[int, float],
    flops: Mapping[int, int],
    engines: Mapping[int, Mapping[str, float]] | None = None,
    cpu: tuple[float, float] | None = (0.0, 0.0),
    completed: int = 0,
    latencies: Sequence[tuple[float, float, float]] = (),
    compile_cache: tuple[int, int] = (0, 0),
    host_memory: Mapping[str, int] = HOST_MEMORY,
    core_memory: Mapping[int, Mapping[str, int]] | None = None,
    models: Sequence[snapshot_models.LoadedModel] = (),
) -> snapshot_models.RuntimeProcess:
    """A runtime process owning ``cores`` with these cumulative counters (per core: busy seconds,
    FLOPs, per-engine seconds; CPU seconds (user, system), completed executions, no errors) and
    these gauges (host memory, device memory per core by category, loaded models)."""
    return snapshot_models.RuntimeProcess(
        pid=pid,
        tag=str(pid) if tag is None else tag,
        command=command,
        runtime_version=runtime_version,
        neuroncores=tuple(cores),
        cpu=None if cpu is None else snapshot_models.CpuTimes(user=cpu[0], system=cpu[1]),
        cores={
            c: snapshot_models.CoreCounters(busy=busy[c], flops=flops[c], engines=dict((engines or {}).get(c, {})))
            for c in cores
        },
        executions=snapshot_models.ExecutionCounts(
            **{**dict.fromkeys(EXECUTION_SUMMARY_KEYS, 0), "completed": completed}
        ),
        errors=snapshot_models.ErrorCounts(**dict.fromkeys(ERROR_SUMMARY_KEYS, 0)),
        latencies=tuple(snapshot_models.Latency(*lat) for lat in latencies),
        compile_cache=snapshot_models.CompileCache(hits=compile_cache[0], misses=compile_cache[1]),
        memory=snapshot_models.ProcessMemory(
            host=snapshot_models.HostMemoryUsage(**host_memory),
            cores={
                c: snapshot_models.CoreMemoryUsage(**(core_memory or {}).get(c, dict.fromkeys(CORE_MEMORY_KEYS, 0)))
                for c in cores
            },
        ),
        loaded_models=tuple(models),
    )


def no_retired() -> snapshot_models.RuntimeProcess:
    """The daemon's retired totals (pid 0) before any process exited."""
    return runtime_process(
        0,
        tag="retired",
        runtime_version="",
        cores=[],
        busy={},
        flops={},
        cpu=None,
        host_memory=dict.fromkeys(HOST_MEMORY, 0),
    )


def instance(instance_type: str, instance_id: str) -> InstanceIdentity:
    return InstanceIdentity(
        instance_name="",
        instance_id=instance_id,
        instance_type=instance_type,
        instance_availability_zone="us-west-2d",
        instance_availability_zone_id="usw2-az4",
        instance_region="us-west-2",
        ami_id="ami-0123456789abcdef0",
        subnet_id="subnet-0123456789abcdef0",
    )


def trn1_hardware(devices: int, cores_per_device: int = 2) -> HardwareInfo:
    return HardwareInfo(
        neuron_device_type="trainium",
        neuron_device_version="v2",
        neuroncore_version="v2",
        neuron_device_count=devices,
        neuron_device_memory_size=32 * 1024 * MB,
        neuroncore_per_device_count=cores_per_device,
        logical_neuroncore_config=1,
    )


def snapshot(
    *,
    time: float,
    monotonic: float,
    instance: InstanceIdentity,
    hardware: HardwareInfo,
    processes: Sequence[snapshot_models.RuntimeProcess],
    vcpus: Sequence[Mapping[str, float]],
    context_switches: int = 0,
    host_memory: Mapping[str, int] | None = None,
    ecc: Mapping[int, Mapping[str, int]] | None = None,
    retired: snapshot_models.RuntimeProcess | None = None,
    latency_log: Sequence[tuple[int, tuple[float, float, float]]] = (),
) -> dict[str, Any]:
    """A whole snapshot as the daemon writes it: ``vcpus`` one row of cumulative seconds per CPU
    (states as docs/snapshot.md), ``host_memory`` the host's (total, used, swap_total, swap_used;
    default 32 GiB, 9 GiB used), ``ecc`` ECC counts per device (default none), ``retired`` the
    counters of processes that have exited (pid 0; default: none exited), ``latency_log`` the
    node's (sequence, (end, total, device)) of recent executions (default: none)."""
    devices = hardware.neuron_device_count
    taken = snapshot_models.Snapshot(
        time=time,
        monotonic=monotonic,
        instance=instance,
        hardware=hardware,
        processes=tuple(processes),
        host=snapshot_models.HostSnapshot(
            vcpus=tuple(snapshot_models.VcpuTimes(**row) for row in vcpus),
            context_switches=context_switches,
            memory=snapshot_models.HostMemory(
                **(host_memory or {"total": 33110204416, "used": 9876543488, "swap_total": 0, "swap_used": 0})
            ),
        ),
        hardware_counters=tuple(
            snapshot_models.DeviceCounters(
                neuron_device_index=d, **{**dict.fromkeys(HW_COUNTER_KEYS, 0), **(ecc or {}).get(d, {})}
            )
            for d in range(devices)
        ),
        retired=retired if retired is not None else no_retired(),
        latency_log=tuple((seq, snapshot_models.Latency(*lat)) for seq, lat in latency_log),
    )
    return SNAPSHOT.dump(taken)
