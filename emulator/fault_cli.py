"""``neuron-emulator fault {slow,nan,ecc,efa,clear}``: faults of one node (docs/faults.md).

The node is the daemon at ``--socket``/``--port`` or NEURON_EMULATOR_ADDR; :func:`target_address`
is the one place that chooses it (a ``--node N`` of a cluster resolves there).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from emulator.runtime.core_spec import format_core_ids
from emulator.runtime.faults import HARDWARE_ERROR_STATUS
from neurontools.cli import CliError, UsageError
from neurontools.report.names import ECC_EVENTS, MEM_ECC_UNCORRECTED
from neurontools.sources.address import DaemonAddress
from neurontools.sources.daemon_client import DaemonClient, DaemonError, DaemonUnavailable

PROG = "neuron-emulator"
KINDS = ("slow", "nan", "ecc", "efa", "clear")
DEFAULT_ECC_EVENT = MEM_ECC_UNCORRECTED.key  # `neuron-emulator fault ecc` without --type
MAX_SLOW_FACTOR = 1000.0


def add_fault_command(sub: Any) -> None:
    """The ``fault`` subcommand on ``sub`` (the subparsers of ``neuron-emulator``)."""
    fault = sub.add_parser(
        "fault",
        help="inject faults on the node: slow cores, numerical errors, ECC events, EFA bandwidth; clear them",
        description="slow --factor F: executions take F x their device time; nan: executions complete with "
        "a numerical error; ecc: count ECC events (an uncorrectable one fails the core's next execution); "
        "efa --factor F: inter-node bandwidth factor; clear: remove all of them. Default target: every "
        "NeuronCore of the node. docs/faults.md.",
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
    fault.add_argument("--socket", metavar="PATH", help="daemon socket (default: NEURON_EMULATOR_ADDR)")
    fault.add_argument("--port", type=int, metavar="N", help="daemon on 127.0.0.1:N")


def target_address(
    args: argparse.Namespace, address_of: Callable[[argparse.Namespace], DaemonAddress]
) -> DaemonAddress:
    """The daemon of the node the fault is for: ``--socket``/``--port``/NEURON_EMULATOR_ADDR
    (``address_of``, the command line's own resolution)."""
    return address_of(args)


def fault_body(args: argparse.Namespace) -> dict[str, Any] | None:
    """The ``POST /v1/faults`` body of the command line (None: ``clear``); UsageError for flags
    that do not fit the kind."""
    kind = args.kind
    if args.factor is not None and kind not in ("slow", "efa"):
        raise UsageError(f"--factor applies to slow and efa, not {kind}")
    if (args.event_type is not None or args.count is not None) and kind != "ecc":
        raise UsageError(f"--type and --count apply to ecc, not {kind}")
    if (args.device is not None or args.core is not None) and kind in ("efa", "clear"):
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


def run_fault(args: argparse.Namespace, address_of: Callable[[argparse.Namespace], DaemonAddress]) -> int:
    body = fault_body(args)
    client = DaemonClient(target_address(args, address_of), timeout=3.0)
    try:
        answer = client.delete("/faults") if body is None else client.post("/faults", body)
    except DaemonUnavailable as exc:
        raise CliError(str(exc)) from None
    except DaemonError as exc:
        raise CliError(f"daemon refused: {exc}") from None
    for line in describe(body, answer):
        print(f"{PROG}: {line}")
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
