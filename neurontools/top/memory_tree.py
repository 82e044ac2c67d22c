"""The Memory Usage Details tree: device -> NeuronCore -> model -> categories (docs/reference/neuron-top.md
§Memory tree).

Parent rows show the sum of their children. A model node holds what the model allocated at load
time (its subgraphs on that core); what belongs to a core but to no model (tensors created while
training, the shared scratchpad, ...) is shown as category rows directly under the core.

A ``TreeCache`` keeps the core subtrees of the previous build and reuses those whose inputs (the
core's memory and its models) are equal: a training job's memory mostly stays put from one second
to the next, and a trn1.32xlarge has 32 cores of models and categories to rebuild otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from neurontools.contract.inventory import CoreLayout
from neurontools.contract.names import DEVICE_CATEGORIES
from neurontools.top.formats import core_label, device_label
from neurontools.top.model import ModelMemory, Sample
from neurontools.top.view import cores_memory, selected

# Category leaves: (label, device key, host key or None when the category has no host part),
# from the category table (report.names).
CATEGORIES: tuple[tuple[str, str, str | None], ...] = tuple(
    (c.label, c.key, c.key if c.host else None) for c in DEVICE_CATEGORIES
)
NO_HOST = -1  # host column left empty: the row has no host part


@dataclass(frozen=True)
class TreeNode:
    key: str  # stable across refreshes: expansion state and selection follow it
    label: str
    device_bytes: int | None
    host_bytes: int | None  # None: unknown (NA); NO_HOST: not applicable
    model_id: str = ""
    children: tuple[TreeNode, ...] = ()
    dim: bool = False


@dataclass(frozen=True)
class Row:
    """One visible line of the tree."""

    node: TreeNode
    depth: int
    expanded: bool


def _leaves(
    prefix: str, device: Mapping[str, int] | None, host: Mapping[str, int] | None, *, with_host: bool
) -> tuple[TreeNode, ...]:
    leaves = []
    for label, dkey, hkey in CATEGORIES:
        if device is not None and dkey not in device:
            continue  # a model's load-time memory has no scratchpad
        dev = device.get(dkey) if device is not None else None
        hst = NO_HOST if hkey is None or not with_host else (host.get(hkey) if host is not None else None)
        leaves.append(TreeNode(f"{prefix}/{dkey}", label, dev, hst))
    return tuple(leaves)


def _model_node(prefix: str, pid: int | None, model: ModelMemory) -> TreeNode:
    key = f"{prefix}/m{model.model_id}" + (f"@{pid}" if pid is not None else "")
    return TreeNode(
        key,
        model.name,
        model.device_total,
        model.host_total,
        model_id=str(model.model_id),
        children=_leaves(key, model.device, model.host, with_host=True),
    )


def _sum(values: list[int | None]) -> int | None:
    """Sum of known values, ignoring rows without a host part; None if any is unknown."""
    if any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None and v != NO_HOST)


# What a core's subtree is made of: its memory by category (None: unknown) and its models, each
# with the PID its key carries (None when a single application is selected)
CoreInputs = tuple[dict[str, int] | None, tuple[tuple[int | None, ModelMemory], ...]]


def _core_node(key: str, local: int, inputs: CoreInputs) -> TreeNode:
    usage, models = inputs
    model_nodes = [_model_node(key, p, m) for p, m in models]
    rest = None
    if usage is not None:
        rest = {k: max(v - sum(m.device.get(k, 0) for _, m in models), 0) for k, v in usage.items()}
    children = (*model_nodes, *_leaves(key, rest, None, with_host=False))
    return TreeNode(
        key,
        core_label(local),
        _sum([c.device_bytes for c in children]),
        _sum([c.host_bytes for c in children]) if usage is not None else None,
        children=children,
    )


class TreeCache:
    """The previous ``build_tree`` result and its core subtrees with their inputs."""

    def __init__(self) -> None:
        self.cores: dict[str, tuple[CoreInputs, TreeNode]] = {}
        self.tree: tuple[TreeNode, ...] | None = None


def build_tree(sample: Sample, pid: int | None, cache: TreeCache | None = None) -> tuple[TreeNode, ...]:
    """One node per Neuron device of the instance, for the selected tab. With ``cache``, the
    subtrees of cores whose inputs did not change are the previous ones, and so is the whole tree
    (the same tuple) when nothing changed."""
    layout = sample.layout or CoreLayout(0, 0)
    usage = cores_memory(sample, pid, layout.core_count)
    apps = selected(sample, pid)
    models: dict[int, list[tuple[int | None, ModelMemory]]] = {}
    for app in apps:
        for model in app.models:
            models.setdefault(model.core, []).append((app.pid if len(apps) > 1 else None, model))
    known = cache.cores if cache is not None else {}
    made: dict[str, tuple[CoreInputs, TreeNode]] = {}
    rebuilt = False
    devices = []
    for device in range(layout.device_count):
        key = f"nd{device}"
        cores = []
        for local in range(layout.cores_per_device):
            core_key, core = f"{key}/nc{local}", layout.core_id(device, local)
            inputs: CoreInputs = (usage[core], tuple(models.get(core, ())))
            previous = known.get(core_key)
            if previous is not None and previous[0] == inputs:
                node = previous[1]
            else:
                node, rebuilt = _core_node(core_key, local, inputs), True
            made[core_key] = (inputs, node)
            cores.append(node)
        devices.append(
            TreeNode(
                key,
                device_label(device),
                _sum([c.device_bytes for c in cores]),
                _sum([c.host_bytes for c in cores]),
                children=tuple(cores),
            )
        )
    if cache is None:
        return tuple(devices)
    if rebuilt or cache.tree is None or made.keys() != known.keys():  # else: the same cores, the same tree
        cache.tree = tuple(devices)
    cache.cores = made
    return cache.tree


def default_expanded(node: TreeNode) -> bool:
    """Devices and cores that hold memory start expanded; models and empty nodes collapsed."""
    return not node.model_id and bool(node.device_bytes)


def visible_rows(nodes: tuple[TreeNode, ...], expanded: Mapping[str, bool]) -> list[Row]:
    rows: list[Row] = []

    def walk(items: tuple[TreeNode, ...], depth: int) -> None:
        for node in items:
            is_open = bool(node.children) and expanded.get(node.key, default_expanded(node))
            rows.append(Row(node, depth, is_open))
            if is_open:
                walk(node.children, depth + 1)

    walk(nodes, 0)
    return rows


def all_keys(nodes: tuple[TreeNode, ...]) -> list[str]:
    """Keys of every node that has children."""
    keys: list[str] = []
    for node in nodes:
        if node.children:
            keys.append(node.key)
            keys.extend(all_keys(node.children))
    return keys


def parent_key(key: str) -> str | None:
    return key.rsplit("/", 1)[0] if "/" in key else None
