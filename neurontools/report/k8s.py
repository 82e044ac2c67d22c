"""Which Kubernetes pod holds which NeuronCore and Neuron device, derived once from a snapshot
(docs/kubernetes.md): neuron-monitor's ``neuron_k8s_info`` object and neuron-exporter's
``pod``/``namespace``/``container`` labels are both written from here.

A core belongs to the pod of the runtime process that owns it (the snapshot's ``pod`` of that
process); a core without an owner, or owned by a process that runs in no pod, has no entry. A
device belongs to the pod holding its lowest-numbered held core; its containers are that pod's
containers holding cores of the device. (The report's shape has one pod per device; when cores of
one device are given to two pods, the second is left out there: docs/kubernetes.md §Limits.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from neurontools.contract.inventory import HardwareInfo, PodRef
from neurontools.contract.snapshot_models import ProcessSnapshot, Snapshot

# label values of a core no pod holds (dcgm-exporter's convention: empty strings)
NO_POD_LABELS = ("", "", "")


@dataclass(frozen=True)
class PodUse:
    """One pod's use of a core or a device: ``neuron_k8s_info``'s value shape."""

    pod_name: str
    namespace: str
    container_names: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {"pod_name": self.pod_name, "namespace": self.namespace, "container_name": list(self.container_names)}


def pods_by_core(processes: Iterable[ProcessSnapshot]) -> dict[int, PodRef]:
    """Global core id -> the pod container of the runtime process owning it, in core order."""
    owned: dict[int, PodRef] = {}
    for proc in processes:
        if proc.is_runtime and proc.pod is not None:
            for core in proc.neuroncores:
                owned.setdefault(core, proc.pod)
    return dict(sorted(owned.items()))


def _containers(pods: Iterable[PodRef]) -> tuple[str, ...]:
    return tuple(sorted({pod.container_name for pod in pods if pod.container_name}))


def core_uses(snapshot: Snapshot) -> dict[int, PodUse]:
    """``neuroncores_k8s_info``: core -> its pod and container."""
    return {
        core: PodUse(pod.pod_name, pod.namespace, _containers((pod,)))
        for core, pod in pods_by_core(snapshot.runtime_processes).items()
    }


def device_uses(snapshot: Snapshot) -> dict[int, PodUse]:
    """``neurondevices_k8s_info``: device -> the pod of its lowest held core and that pod's containers on it."""
    hardware: HardwareInfo = snapshot.hardware
    by_device: dict[int, list[PodRef]] = {}
    for core, pod in pods_by_core(snapshot.runtime_processes).items():
        by_device.setdefault(hardware.layout.device_of(core), []).append(pod)
    uses = {}
    for device, pods in sorted(by_device.items()):
        first = pods[0]
        same = [p for p in pods if (p.pod_name, p.namespace) == (first.pod_name, first.namespace)]
        uses[device] = PodUse(first.pod_name, first.namespace, _containers(same))
    return uses


def core_labels(snapshot: Snapshot | None) -> dict[int, tuple[str, str, str]]:
    """Core -> (pod, namespace, container) label values of the cores a pod holds (others: ``NO_POD_LABELS``)."""
    if snapshot is None:
        return {}
    return {
        core: (pod.pod_name, pod.namespace, pod.container_name)
        for core, pod in pods_by_core(snapshot.runtime_processes).items()
    }
