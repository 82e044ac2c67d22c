"""Which emulated instance each node of a multi-node job runs on (docs/multinode.md).

A job of ``--nodes N`` puts its ranks ``i * R .. (i + 1) * R - 1`` (R ranks per node) on node
``i`` (the job's rank grid, ``emulator.parallel.ranks``). Where node ``i`` is:

- **one host, an emulated cluster** (``neuron-emulator cluster up --nodes M``, M >= N): node ``i``
  is the cluster's node ``i``; its daemon address comes from the cluster's state file. One
  launcher drives every node's ranks.
- **one emulator per host** (``--node-rank R --master-addr HOST --master-port P`` on each host,
  as torchrun's multi-node launch is given them): this launcher drives node ``R`` only, on the
  daemon at ``NEURON_EMULATOR_ADDR``, and meets the other hosts' launchers at the c10d store on
  ``HOST:P`` (``emulator.parallel.rendezvous``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from emulator.parallel.plan import ConfigError


@dataclass(frozen=True)
class NodeTargets:
    """The nodes this launcher drives: node index -> daemon address, and the job's node count."""

    nodes: int
    addresses: dict[int, str]
    node_rank: int | None = None  # set when each host runs its own launcher
    master_addr: str = "127.0.0.1"
    master_port: int = 0
    instance_type: str | None = None  # the cluster's, when the nodes come from one

    @property
    def distributed(self) -> bool:
        """Launchers on several hosts meet at a c10d store."""
        return self.node_rank is not None and self.nodes > 1


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cluster_targets(nodes: int) -> NodeTargets:
    """Nodes 0..N-1 of the emulated cluster on this host; ConfigError when there is none or it is
    smaller than the job."""
    from emulator.cluster.layout import Layout
    from emulator.cluster.state import StateError, read_state

    layout = Layout.default()
    try:
        state = read_state(layout)
    except StateError as exc:
        raise ConfigError(str(exc)) from None
    if state is None or not _pid_alive(state.pid):
        raise ConfigError(
            f"--nodes {nodes}: no emulated cluster runs (start one with 'neuron-emulator cluster up --nodes {nodes}'"
            ", or run one launcher per host with --node-rank, --master-addr and --master-port)"
        )
    if len(state.nodes) < nodes:
        raise ConfigError(
            f"--nodes {nodes}: the running cluster has {len(state.nodes)} node(s) "
            f"(host pid {state.pid}; 'neuron-emulator cluster status')"
        )
    return NodeTargets(
        nodes=nodes,
        addresses={n.index: n.address for n in state.nodes[:nodes]},
        instance_type=state.instance_type,
    )


def host_targets(nodes: int, node_rank: int, master_addr: str, master_port: int, address: str) -> NodeTargets:
    """This host's node of a job with one launcher per host."""
    if not 0 <= node_rank < nodes:
        raise ConfigError(f"--node-rank {node_rank}: expected 0 to {nodes - 1} for --nodes {nodes}")
    if not 0 < master_port < 65536:
        raise ConfigError(f"--master-port {master_port}: expected a TCP port (1-65535)")
    return NodeTargets(
        nodes=nodes,
        addresses={node_rank: address},
        node_rank=node_rank,
        master_addr=master_addr,
        master_port=master_port,
    )


def single_node(address: str) -> NodeTargets:
    return NodeTargets(nodes=1, addresses={0: address})
