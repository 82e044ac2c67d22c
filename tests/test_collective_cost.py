"""One collective, one cost (docs/collectives.md): the same all-reduce on the same NeuronCores
costs the same seconds whether a replayed plan or a real gloo collective of a script performs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

from emulator.costmodel import cost_group_collective
from emulator.hardware import get_instance_type
from emulator.parallel.comm import CollectiveCall
from emulator.parallel.job import CollectiveCost, _stage_cost
from emulator.parallel.plan import ParallelConfig
from emulator.parallel.tracer import StageMemory, StageProgram, TracedGraph
from tests.support import tool_env, wait_until

HELPER = Path(__file__).parent / "helpers" / "all_reduce_once.py"
TRN1_32 = get_instance_type("trn1.32xlarge")
NBYTES = 4 << 20


def planned_all_reduce(config: ParallelConfig, nbytes: int) -> CollectiveCost:
    """The data-parallel all-reduce of a one-graph stage, costed as ``plan_job`` costs it."""
    graph = TracedGraph(
        name="optimizer",
        graph_hash="0" * 20,
        ops=0,
        device_ops=0,
        compute_seconds=0.0,
        flops=0,
        engines={},
        hbm_bytes=0,
        compile_seconds=0.0,
        code_bytes=0,
        collectives=(CollectiveCall("all_reduce", "dp", nbytes),),
    )
    memory = StageMemory(0, 0, 0, 0, 0, 0, 0, 0, TRN1_32.core_memory_bytes)
    program = StageProgram(stage=0, graphs={"optimizer": graph}, memory=memory, send_bytes=0, parameters=0)
    stage = _stage_cost(program, 0, config, TRN1_32, config.grid.placements())
    return stage.collectives["optimizer"][0]


def run_ranks(address: str, world: int, argv: list[str], cache: Path) -> list[str]:
    """``world`` ranks of one node with torchrun's environment and a store this test hosts."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    procs = []
    for rank in range(world):
        env = {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(store.port),
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "NEURON_COMPILE_CACHE_URL": str(cache),
            "OMP_NUM_THREADS": "1",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, str(HELPER), *argv],
                env=tool_env(address, env),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(o[-2000:] for o in outs)
    return outs


def test_an_all_reduce_costs_the_same_in_a_plan_and_under_exec(daemon_factory, short_tmp: Path) -> None:
    # TP2 x DP2 on 4 cores of a trn1.32xlarge: the data-parallel groups are cores (0, 2) and
    # (1, 3), each pair on chips 0 and 1, both rings over the same NeuronLink at once
    config = ParallelConfig(tp=2, pp=1, dp=2, micro_batch=1, global_batch=2, seq_len=1)
    dp_groups = config.grid.groups("dp")
    assert dp_groups == [[0, 2], [1, 3]]
    planned = planned_all_reduce(config, NBYTES)
    alone = cost_group_collective("all_reduce", NBYTES, (0, 2), TRN1_32).seconds
    assert planned.seconds > alone  # the sharing is in the cost: a placement-blind model would miss it

    daemon = daemon_factory("trn1.32xlarge")
    outs = run_ranks(daemon.address, 4, [str(NBYTES), json.dumps(dp_groups)], short_tmp / "cache")
    assert all('"sum": 2.0' in o for o in outs), outs  # the values were really reduced, in pairs
    assert wait_until(lambda: daemon.processes() == [], 10)
    link = daemon.client.get("/snapshot")["retired"]["collectives"]["neuronlink"]
    assert link["operations"] == 4  # one all-reduce reported by each rank
    assert link["seconds"] / 4 == pytest.approx(planned.seconds, rel=1e-9)
    assert link["bytes"] == 4 * planned.link_bytes["neuronlink"]
