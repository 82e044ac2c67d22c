"""``neuron-emulator fault {slow,nan,ecc,efa,node-down,clear}``: faults of one node (docs/faults.md).

The node is the daemon at ``--socket``/``--port`` or NEURON_EMULATOR_ADDR, or node N of the running
cluster (``--node N``, docs/cluster.md); :func:`target_address` is the one place that chooses it.
``node-down`` is not asked of the node's daemon but of the cluster's host, which serves the node
(``emulator/cluster/fleet.py``).
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from emulator.cli.args import Handler, add_daemon_address, daemon_address, node_index
from emulator.runtime.core_spec import format_core_ids
from emulator.runtime.faults import HARDWARE_ERROR_STATUS
from neurontools.cli import CliError, UsageError
from neurontools.contract.names import ECC_EVENTS, MEM_ECC_UNCORRECTED
from neurontools.sources.address import DaemonAddress
from neurontools.sources.daemon_client import DaemonClient, DaemonError, DaemonUnavailable

PROG = "neuron-emulator"
KINDS = ("slow", "nan", "ecc", "efa", "node-down", "clear")
NODE_DOWN = "node-down"
DEFAULT_ECC_EVENT = MEM_ECC_UNCORRECTED.key  # `neuron-emulator fault ecc` without --type
MAX_SLOW_FACTOR = 1000.0


def add(sub: Any) -> dict[str, Handler]:
    """The ``fault`` subcommand on ``sub`` (the subparsers of ``neuron-emulator``)."""
    fault = sub.add_parser(
        "fault",
        help="inject faults on the node: slow cores, numerical errors, ECC events, EFA bandwidth, node loss; "
        "clear them",
        description="slow --factor F: executions take F x their device time; nan: executions complete with "
        "a numerical error; ecc: count ECC events (an uncorrectable one fails the core's next execution); "
        "efa --factor F: inter-node bandwidth factor; node-down: a cluster node is lost (its processes are "
        "killed, its daemon and exporter stop; 'neuron-emulator cluster node-up' brings it back); clear: remove "
        "all but node loss. Default target: every NeuronCore of the node. docs/faults.md.",
    )
    fault.add_argument("kind", choices=KINDS, help="fault kind: " + ", ".join(KINDS))
    fault.add_argument("--device", type=int, metavar="N", help="Neuron device index (its cores)")
    fault.add_argument("--core", type=int, metavar="C", help="one NeuronCore")
    fault.add_argument("--factor", type=float, metavar="F", help="slow: > 1 (time factor); efa: 0 < F <= 1")
    fault.add_argument(
        "--type",
        dest="event_type",
        choices=ECC_EVENTS,
        metavar="EVENT",
        help="ecc: " + ", ".join(f"{e} (default)" if e == DEFAULT_ECC_EVENT else e for e in ECC_EVENTS),
    )
    fault.add_argument("--count", type=int, metavar="N", help="ecc: events to count (default 1)")
    where = fault.add_mutually_exclusive_group()
    where.add_argument(
        "--node",
        type=node_index,
        metavar="N",
        help="node N of the running cluster (neuron-emulator cluster status); default: NEURON_EMULATOR_ADDR",
    )
    add_daemon_address(where)
    return {"fault": run_fault}


def target_address(args: argparse.Namespace) -> DaemonAddress:
    """The daemon of the node the fault is for: node ``--node N`` of the running cluster, else
    ``--socket``/``--port``/NEURON_EMULATOR_ADDR (the command line's one resolution)."""
    if getattr(args, "node", None) is not None:
        from emulator.cluster.control import node_address

        return node_address(args.node)
    return daemon_address(args)


def fault_body(args: argparse.Namespace) -> dict[str, Any] | None:
    """The ``POST /v1/faults`` body of the command line (None: ``clear``, ``node-down``); UsageError for flags
    that do not fit the kind."""
    kind = args.kind
    if args.factor is not None and kind not in ("slow", "efa"):
        raise UsageError(f"--factor applies to slow and efa, not {kind}")
    if (args.event_type is not None or args.count is not None) and kind != "ecc":
        raise UsageError(f"--type and --count apply to ecc, not {kind}")
    if (args.device is not None or args.core is not None) and kind in ("efa", NODE_DOWN, "clear"):
        raise UsageError(f"{kind} applies to the whole node: no --device or --core")
    for flag, value in (("--device", args.device), ("--core", args.core)):
        if value is not None and value < 0:
            raise UsageError(f"{flag} {value}: expected a non-negative index")
    target = {k: v for k, v in (("neuron_device", args.device), ("core", args.core)) if v is not None}
    if kind == "slow":
        factor = _factor(args.factor, "slow")
        if not 1 < factor <= MAX_SLOW_FACTOR:
            raise UsageError(f"--factor {args.factor:g}: slow needs a factor > 1 and <= {MAX_SLOW_FACTOR:g}")
        return {"kind": "slow", "factor": factor, **target}
    if kind == "efa":
        factor = _factor(args.factor, "efa")
        if not 0 < factor <= 1:
            raise UsageError(f"--factor {args.factor:g}: efa needs a bandwidth factor 0 < F <= 1")
        return {"kind": "efa", "factor": factor}
    if kind == "nan":
        return {"kind": "nan", **target}
    if kind == "ecc":
        if not target:
            raise UsageError("ecc needs --device N or --core C")
        count = 1 if args.count is None else args.count
        if count < 1:
            raise UsageError(f"--count {count}: expected 1 or more")
        return {"kind": "ecc", "event_type": args.event_type or DEFAULT_ECC_EVENT, "count": count, **target}
    return None


def _factor(value: float | None, kind: str) -> float:
    if value is None:
        raise UsageError(f"{kind} needs --factor F")
    if not math.isfinite(value):
        raise UsageError(f"--factor {value}: expected a finite number")
    return value


def run_fault(args: argparse.Namespace) -> int:
    if args.kind == NODE_DOWN:
        return run_node_down(args)
    body = fault_body(args)
    client = DaemonClient(target_address(args), timeout=3.0)
    try:
        answer = client.delete("/faults") if body is None else client.post("/faults", body)
    except DaemonUnavailable as exc:
        raise CliError(str(exc)) from None
    except DaemonError as exc:
        raise CliError(f"daemon refused: {exc}") from None
    for line in describe(body, answer):
        print(f"{PROG}: {line}")
    return 0


def run_node_down(args: argparse.Namespace) -> int:
    """``fault node-down``: the cluster's host kills the node's runtime processes and stops its
    daemon and exporter. The node is ``--node N``, or the cluster node at the daemon address."""
    from emulator.cluster.control import node_at, running_cluster, take_down

    fault_body(args)  # refuses the flags of other kinds
    index = args.node
    if index is None:
        address = daemon_address(args)
        found = node_at(address)
        if found is None:
            raise CliError(
                f"{NODE_DOWN} takes a node of a cluster down ('neuron-emulator cluster up --nodes N', then --node N); "
                f"{address} is no node of a running cluster (a single daemon stops with 'neuron-emulator down')"
            )
        index = found[1].index
    answer = take_down(index)
    state = running_cluster()
    node = state.nodes[index]
    print(
        f"{PROG}: node {index} ({node.instance_id}) is down: its daemon at {node.address} and its exporter at "
        f"{node.exporter_url} stopped (its Prometheus target stays: up == 0)"
    )
    killed = answer.get("killed", [])
    what = ", ".join(f"{p['pid']} ({p['command'][:40]})" for p in killed) if killed else "none was attached"
    print(f"{PROG}: runtime processes killed: {what}")
    print(f"{PROG}: 'neuron-emulator cluster node-up --node {index}' brings it back ('fault clear' does not)")
    return 0


def describe(body: dict[str, Any] | None, answer: dict[str, Any]) -> list[str]:
    """What the fault did, one line each."""
    if body is None:
        return ["faults cleared (counted ECC events stay)"]
    cores = [int(c["core"]) for c in answer.get("cores", [])]
    kind = body["kind"]
    if kind == "efa":
        return [f"EFA bandwidth x{body['factor']:g} (inter-node collectives)"]
    if kind == "slow":
        slow = [c["core"] for c in answer["cores"] if c["slow_factor"] == body["factor"]]
        return [f"{_cores(slow)}: executions take {body['factor']:g}x their device time"]
    if kind == "nan":
        nan = [c["core"] for c in answer["cores"] if c["nan"]]
        return [f"{_cores(nan)}: executions complete with a numerical error (completed_with_num_err)"]
    event = body["event_type"]
    lines = [f"device {c['neuron_device_index']}: {event} = {c[event]}" for c in answer.get("hardware_counters", [])]
    if event in HARDWARE_ERROR_STATUS:
        armed = [c for c in cores if next(x for x in answer["cores"] if x["core"] == c)["hardware_error"] == event]
        lines.append(f"{_cores(armed)}: the next execution fails with {HARDWARE_ERROR_STATUS[event]}")
    return lines


def _cores(cores: list[int]) -> str:
    return format_core_ids(tuple(cores)) if cores else "no NeuronCore"


def status_lines(client: DaemonClient) -> list[str]:
    """``neuron-emulator status``: the active faults, one line each (none: no line)."""
    try:
        state = client.get("/faults")
    except DaemonError:  # a daemon without faults
        return []
    lines = []
    if state.get("efa_bandwidth_factor", 1.0) != 1.0:
        lines.append(f"  EFA bandwidth x{state['efa_bandwidth_factor']:g}")
    for c in state.get("cores", []):
        what = []
        if c["slow_factor"] != 1.0:
            what.append(f"slow x{c['slow_factor']:g}")
        if c["nan"]:
            what.append("numerical errors")
        if c["hardware_error"]:
            what.append(f"next execution fails ({c['hardware_error']})")
        lines.append(f"  nc{c['core']:<8} {', '.join(what)}")
    return lines
