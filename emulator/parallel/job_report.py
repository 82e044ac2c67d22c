"""A launcher's account of each step to the daemons of its nodes (``POST /v1/jobs/{id}/steps``).

For every node it drives, after every step (docs/multinode.md):

- ``step_seconds``: how long the node's own ranks took — from the step's common start to the last
  of them ending it (their replayed device work, slow cores included), without waiting for others;
- ``wait_seconds``: the time the node then waited for the job's slowest node until the step
  ended for everyone (in a real job: blocked in the step's collectives), so ``step_seconds +
  wait_seconds`` is the job's step time on every node;
- ``samples``: the step's global batch (sequences the whole job trained in the step).

The daemon keeps them per job as counters (``neuron_job_*`` in neuron-exporter). A daemon that
does not answer loses the report, as an unreachable monitoring endpoint would; training goes on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from neurontools.sources.address import AddressError, parse_address
from neurontools.sources.daemon_client import DaemonClient, DaemonError, DaemonUnavailable

if TYPE_CHECKING:
    from emulator.parallel.job import JobPlan
    from emulator.parallel.nodes import NodeTargets

REPORT_TIMEOUT_S = 2.0


class JobReporter:
    def __init__(self, job_id: str, targets: NodeTargets, plan: JobPlan) -> None:
        self.job_id = job_id
        self.samples = plan.config.global_batch
        self.node_of = {p.rank: p.node for p in plan.places}
        self.clients: dict[int, DaemonClient] = {}
        for node, address in targets.addresses.items():
            try:
                self.clients[node] = DaemonClient(parse_address(address), timeout=REPORT_TIMEOUT_S)
            except AddressError:
                continue
        self.dead: set[int] = set()

    def step(self, step: int, start: float, end: float, rank_ends: dict[int, float]) -> None:
        """``rank_ends``: each of this launcher's ranks' end of the step; ``end`` the job's."""
        by_node: dict[int, list[float]] = {}
        for rank, rank_end in rank_ends.items():
            by_node.setdefault(self.node_of[rank], []).append(rank_end)
        for node, ends in sorted(by_node.items()):
            client = self.clients.get(node)
            if client is None or node in self.dead:
                continue
            body = {
                "step": step,
                "step_seconds": max(0.0, max(ends) - start),
                "wait_seconds": max(0.0, end - max(ends)),
                "samples": self.samples,
                "ranks": len(ends),
            }
            try:
                client.post(f"/jobs/{self.job_id}/steps", body)
            except DaemonUnavailable:
                self.dead.add(node)  # the node is gone: its ranks' loss ends the job
            except DaemonError:
                continue
