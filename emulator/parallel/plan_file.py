"""The job plan a launcher hands its replaying ranks: one JSON file, read without torch.

Written by ``emulator.parallel.launch`` from a :class:`~emulator.parallel.job.JobPlan`; read by
each rank (``emulator.parallel.replay``) for its own stage. Per stage: every graph's costed
execution (device time, host time, FLOPs, engine busy time, collectives, the loaded model it
runs as), the slots of step 1 and of a steady step (graph and start offset), and the HBM the
stage's shard holds on each of its cores.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emulator.parallel.ranks import RankGrid
from emulator.runtime.execution import Collective, ModelRef, Work
from neurontools.contract.schema import ENGINE_KEYS

if TYPE_CHECKING:
    from emulator.parallel.job import CollectiveCost, JobPlan
    from emulator.runtime.compile_cache import LoadedModel

JOB_PLAN_ENV = "NEURON_EMULATOR_JOB_PLAN"
RANKS_ENV = "NEURON_EMULATOR_RANKS"  # the ranks one replay process drives (--ranks-per-process)
JOB_ID_ENV = "NEURON_EMULATOR_JOB_ID"  # the job's id (docs/multinode.md), the same on every node
FORMAT_VERSION = 2  # 2: each graph's hash and collective calls, the rank grid, the profile directory


@dataclass(frozen=True)
class GraphEntry:
    """A graph of the rank's stage: its modelled cost on a healthy core, the model it runs as;
    for its profile, its hash, its collective calls in graph order (``(index into
    work.collectives, group)``) and the bus bandwidth of each of ``work.collectives``."""

    work: Work
    model: ModelRef
    graph_hash: str = ""
    calls: tuple[tuple[int, str], ...] = ()
    bus_bandwidth: tuple[float, ...] = ()


@dataclass(frozen=True)
class SlotEntry:
    graph: str
    start: float


@dataclass
class RankPlan:
    rank: int
    core: int
    stage: int
    steps: int
    compile_seconds: float
    cached: bool  # the persistent cache held the graphs before the job: step 1 loads, no compile
    first_step_seconds: float
    step_seconds: float
    graphs: dict[str, GraphEntry]
    first: list[SlotEntry]
    steady: list[SlotEntry]
    memory: dict[str, int]
    peak: int
    grid: RankGrid = field(default_factory=RankGrid)
    profile_dir: str = ""  # the graphs' schedule files (neff_<hash>.neff), written on demand
    loaded: set[str] = field(default_factory=set)

    @property
    def node(self) -> int:
        return self.grid.node_of(self.rank)

    def slots(self, *, first: bool) -> list[SlotEntry]:
        return self.first if first else self.steady


def _grouped(costs: Sequence[CollectiveCost]) -> tuple[list[dict[str, Any]], list[list[Any]], list[float]]:
    """A graph's collectives with identical ones folded into one entry and a ``count`` (a GPT
    layer stack repeats the same TP all-reduce a hundred times: one line each would make every
    replayed step's report, and the daemon's work, a hundred times larger); and, for the profile
    (docs/profiling.md), each call in graph order as ``[entry, group]`` and each entry's bus
    bandwidth."""
    keys = [(c.kind, c.nbytes, c.ranks, c.nodes, c.seconds, tuple(sorted(c.link_bytes.items()))) for c in costs]
    counts = Counter(keys)
    index = {key: i for i, key in enumerate(counts)}
    bandwidth = {key: c.bus_bandwidth for key, c in zip(keys, costs, strict=True)}
    entries = [
        {
            "kind": kind,
            "bytes": nbytes,
            "ranks": ranks,
            "nodes": nodes,
            "count": n,
            "seconds": seconds,
            "link_bytes": dict(links),
        }
        for (kind, nbytes, ranks, nodes, seconds, links), n in counts.items()
    ]
    calls = [[index[key], c.group] for key, c in zip(keys, costs, strict=True)]
    return entries, calls, [bandwidth[key] for key in counts]


def plan_document(
    plan: JobPlan,
    *,
    steps: int,
    models: dict[tuple[int, str], LoadedModel],
    compile_seconds: float,
    profile_dir: str = "",
) -> dict:
    """The JSON document of a planned job (``models``: the loaded model of each stage's graph;
    ``profile_dir``: where the launcher writes the graphs' schedule files when a rank profiles)."""
    stages = {}
    for s, cost in plan.stages.items():
        program = cost.program
        graphs = {}
        for name, graph in program.graphs.items():
            t = cost.times[name]
            m = models[(s, name)]
            collectives, calls, bandwidth = _grouped(cost.collectives[name])
            graphs[name] = {
                "device_seconds": t.device_seconds,
                "host_seconds": t.host_seconds,
                "flops": graph.flops,
                "engines": {e: float(graph.engines.get(e, 0.0)) for e in ENGINE_KEYS},
                "model": {"model_id": m.model_id, "uuid": m.uuid, "name": m.name, "code_bytes": m.code_bytes},
                "collectives": collectives,
                "hash": graph.graph_hash,
                "calls": calls,
                "bus_bandwidth": bandwidth,
            }
        in_flight = plan.timeline.stages[s].max_in_flight
        mem = program.memory
        stages[str(s)] = {
            "graphs": graphs,
            "first": [[slot.graph, slot.start] for slot in plan.first_timeline.stages[s].slots],
            "steady": [[slot.graph, slot.start] for slot in plan.timeline.stages[s].slots],
            "memory": {
                "constants": mem.weights,
                "model_code": mem.model_code + mem.code_overhead,
                "model_shared_scratchpad": 0,
                "runtime_memory": mem.runtime,
                "tensors": mem.gradients + mem.optimizer + mem.activations * in_flight,
            },
            "peak": mem.peak(in_flight),
        }
    return {
        "version": FORMAT_VERSION,
        "model": plan.model,
        "steps": steps,
        "compile_seconds": compile_seconds,
        "cached": compile_seconds == 0,
        "first_step_seconds": plan.first_timeline.step_seconds,
        "step_seconds": plan.step_seconds,
        "ranks": [{"rank": p.rank, "core": p.core, "stage": p.pp_rank} for p in plan.places],
        "grid": dataclasses.asdict(plan.config.grid),
        "profile_dir": profile_dir,
        "stages": stages,
    }


def write_plan(document: dict, path: Path) -> None:
    path.write_text(json.dumps(document))


def load_rank_plan(path: str, rank: int) -> RankPlan:
    """One rank's view of the plan file; ValueError when it is not a plan of this version."""
    if not path:
        raise ValueError(f"{JOB_PLAN_ENV} is not set (ranks are started by 'neuron-emulator run')")
    doc = json.loads(Path(path).read_text())
    if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION:
        raise ValueError(f"not a version-{FORMAT_VERSION} job plan")
    ranks = {int(r["rank"]): r for r in doc["ranks"]}
    if rank not in ranks:
        raise ValueError(f"rank {rank} is not in the job ({len(ranks)} ranks)")
    place = ranks[rank]
    stage = doc["stages"][str(place["stage"])]
    graphs = {
        name: GraphEntry(
            Work(
                device_seconds=float(g["device_seconds"]),
                flops=int(g["flops"]),
                engines={k: float(v) for k, v in g["engines"].items()},
                collectives=tuple(Collective(**c) for c in g["collectives"]),
                host_seconds=float(g["host_seconds"]),
            ),
            ModelRef(**g["model"]),
            str(g["hash"]),
            tuple((int(i), str(group)) for i, group in g["calls"]),
            tuple(float(b) for b in g["bus_bandwidth"]),
        )
        for name, g in stage["graphs"].items()
    }
    return RankPlan(
        rank=rank,
        core=int(place["core"]),
        stage=int(place["stage"]),
        steps=int(doc["steps"]),
        compile_seconds=float(doc["compile_seconds"]),
        cached=bool(doc["cached"]),
        first_step_seconds=float(doc["first_step_seconds"]),
        step_seconds=float(doc["step_seconds"]),
        graphs=graphs,
        first=[SlotEntry(str(g), float(t)) for g, t in stage["first"]],
        steady=[SlotEntry(str(g), float(t)) for g, t in stage["steady"]],
        memory={k: int(v) for k, v in stage["memory"].items()},
        peak=int(stage["peak"]),
        grid=RankGrid(**doc["grid"]),
        profile_dir=str(doc["profile_dir"]),
    )
