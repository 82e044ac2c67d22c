"""The argument types every ``neuron-emulator`` command shares: one definition each.

Two kinds. argparse ``type`` callables and flag adders (``--instance-type``, a node index, a node
count, a port base, the exporter's interval from ``neurontools.cli``) refuse a value at parse time:
one line and exit 2. Checkers of flag *text* (:func:`positive_int`, :func:`positive_float`,
:func:`choice`, :func:`core_ids`) raise :class:`ArgumentError`, which ``run`` and ``bench`` report
as one ``neuron-emulator: error: ...`` line with exit status 1 (docs/fuzzing.md).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from emulator.cluster.nodes import MAX_NODES, MIN_NODES
from neurontools.cli import CliError, interval_seconds, number_in_range
from neurontools.sources.address import DaemonAddress, parse_address, resolve_address

__all__ = [
    "ArgumentError",
    "Handler",
    "add_daemon_address",
    "add_identity_flags",
    "add_instance_type",
    "choice",
    "core_ids",
    "daemon_address",
    "identity_argv",
    "interval_seconds",
    "location",
    "node_count",
    "node_index",
    "port_base",
    "positive_float",
    "positive_int",
    "tcp_port",
]


class ArgumentError(ValueError):
    """A bad flag value: one line for stderr."""


Handler = Callable[[argparse.Namespace], int]  # a command's body: its exit status


# -- argparse types --------------------------------------------------------------------------------

node_count = number_in_range(
    int,
    MIN_NODES,
    MAX_NODES,
    invalid="invalid node count {text!r} (expected an integer 1-64)",
    out_of_range=f"{{value}} nodes is out of range (expected {MIN_NODES} to {MAX_NODES})",
)
node_index = number_in_range(
    int,
    0,
    MAX_NODES - 1,
    invalid="invalid node index {text!r} (expected an integer 0-63: a node of 'neuron-emulator cluster status')",
    out_of_range=f"node {{value}} is out of range (expected 0 to {MAX_NODES - 1})",
)
port_base = number_in_range(
    int,
    0,
    65535,
    invalid="invalid port {text!r} (expected an integer 1-65535, or 0 for ports the kernel picks)",
    out_of_range="port {value} is out of range (expected 1-65535, or 0)",
)


def add_instance_type(parser: argparse.ArgumentParser, default: str) -> None:
    """``--instance-type/-i TYPE``: which catalog instance to emulate."""
    from emulator.hardware.instance_types import INSTANCE_TYPES

    parser.add_argument(
        "--instance-type",
        "-i",
        default=default,
        choices=list(INSTANCE_TYPES),
        metavar="TYPE",
        help=f"one of {', '.join(INSTANCE_TYPES)} (default {default})",
    )


def add_daemon_address(parser: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup) -> None:
    """``--socket PATH`` / ``--port N``: the daemon to talk to (default: NEURON_EMULATOR_ADDR)."""
    parser.add_argument("--socket", metavar="PATH", help="daemon socket (default: NEURON_EMULATOR_ADDR)")
    parser.add_argument("--port", type=int, metavar="N", help="daemon on 127.0.0.1:N")


# -- instance identity flags of ``up`` and ``cluster up`` -------------------------------------------

# (flag, metavar, help): where an instance is, shared by every node of a cluster ...
LOCATION_FLAGS = (
    ("--region", "REGION", "default us-west-2"),
    ("--availability-zone", "AZ", "default us-west-2d"),
    ("--availability-zone-id", "AZID", "default usw2-az4"),
    ("--ami-id", "AMI", "e.g. ami-0123456789abcdef0"),
    ("--subnet-id", "SUBNET", "e.g. subnet-0123456789abcdef0"),
)
# ... and what each instance has of its own (``up`` only: a cluster names its nodes)
_INSTANCE_FLAGS = (
    ("--instance-id", "ID", "e.g. i-0123456789abcdef0"),
    ("--instance-name", "NAME", "Name tag (default empty)"),
)


def _identity_flags(instance: bool) -> tuple[tuple[str, str, str], ...]:
    return (*_INSTANCE_FLAGS, *LOCATION_FLAGS) if instance else LOCATION_FLAGS


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def add_identity_flags(group: argparse._ArgumentGroup, *, instance: bool) -> None:
    """The location flags, with ``instance`` the instance's own id and name first."""
    for flag, metavar, text in _identity_flags(instance):
        group.add_argument(flag, metavar=metavar, help=text)
    if instance:
        group.set_defaults(instance_name="")


def identity_argv(args: argparse.Namespace, *, instance: bool) -> list[str]:
    """The identity flags given, as a detached child's command line repeats them."""
    argv: list[str] = []
    for flag, _, _ in _identity_flags(instance):
        value = getattr(args, _dest(flag))
        if value:
            argv += [flag, value]
    return argv


def location(args: argparse.Namespace) -> dict[str, str | None]:
    """The location flags as ``make_identity``'s keywords (None: derived)."""
    return {_dest(flag): getattr(args, _dest(flag)) for flag, _, _ in LOCATION_FLAGS}


# -- checks of flag values -------------------------------------------------------------------------


def tcp_port(flag: str, port: int) -> int:
    """A TCP port to listen on or connect to: CliError outside 1-65535."""
    if not 1 <= port <= 65535:
        raise CliError(f"{flag} {port}: expected 1-65535")
    return port


def daemon_address(args: argparse.Namespace) -> DaemonAddress:
    """The daemon of ``--port``, ``--socket``, else NEURON_EMULATOR_ADDR (or the default socket)."""
    if getattr(args, "port", None) is not None:
        return parse_address(f"http://127.0.0.1:{tcp_port('--port', args.port)}")
    if getattr(args, "socket", None):
        return parse_address(args.socket)
    return resolve_address()


def positive_int(flag: str, text: str | None) -> int | None:
    if text is None:
        return None
    value = text.strip()
    # ASCII digits only ('²'.isdigit() is true), and few enough for int() (docs/fuzzing.md)
    if not (value.isascii() and value.isdigit()) or len(value) > 18 or int(value) < 1:
        raise ArgumentError(f"{flag} {text[:40]!r}: expected a positive integer")
    return int(value)


def positive_float(flag: str, text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ArgumentError(f"{flag} {text!r}: expected a positive number like 0.001 or 3e-4") from None
    if not math.isfinite(value) or value <= 0:
        raise ArgumentError(f"{flag} {text!r}: expected a positive number like 0.001 or 3e-4")
    return value


def choice(flag: str, text: str | None, choices: tuple[str, ...]) -> str | None:
    if text is None:
        return None
    if text not in choices:
        raise ArgumentError(f"{flag} {text!r}: expected one of {', '.join(choices)}")
    return text


def core_ids(text: str | None) -> list[int] | None:
    """``--cores SPEC`` (0, 0-3, 0,1 ...) as NeuronCore indices."""
    if text is None:
        return None
    from emulator.runtime.core_spec import CoreSpecError, parse_core_ids

    try:
        return parse_core_ids(text, name="--cores")
    except CoreSpecError as exc:
        raise ArgumentError(str(exc)) from None
