"""``neuron-ls``: list the Neuron devices of this host and the processes holding them.

Command-line behaviour follows the real Go tool (docs/reference/neuron-ls.md §Command line): go-flags style
options, bad flags reported on stdout with exit 1, no device/daemon reported as one logfmt line
on stderr with exit 1 and nothing on stdout. Shared scaffolding: ``neurontools.cli``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from neurontools.cli import (
    STOPPED,
    BoolFlag,
    UsageError,
    arguments,
    flag_lines,
    parse_bool_flags,
    print_go_flags_error,
    print_logfmt_error,
    show_help,
    silence_stdout,
    stop_signals,
    stopped_status,
)
from neurontools.contract.inventory import Inventory, InventoryError, inventory_from_dict
from neurontools.sources.address import AddressError
from neurontools.sources.daemon_client import DaemonClient, DaemonError, DaemonUnavailable
from neurontools.sources.tool_session import ToolSession

PROG = "neuron-ls"

_OPTIONS = (
    BoolFlag("w", "wide", "wide", "Displays the table in a wider format."),
    BoolFlag(
        "a",
        "show-all-procs",
        "show_all",
        "Show all processes using the Neuron Devices, including processes that aren't using "
        "Neuron Runtime 2.x such as neuron-monitor or neuron-ls",
    ),
    BoolFlag("t", "topology", "topology", "Display topology information about the system's Neuron Devices."),
    BoolFlag("j", "json-output", "json_output", "Output in JSON format"),
)

USAGE = (
    "Usage:\n"
    f"  {PROG} [OPTIONS]\n"
    "\n"
    "Application Options:\n" + flag_lines(_OPTIONS) + "\n"
    "Help Options:\n"
    "  -h, --help            Show this help message\n"
    "\n"
    "Environment:\n"
    "  NEURON_EMULATOR_ADDR  emulator daemon address (socket path or http://127.0.0.1:PORT)\n"
)


@dataclass
class Options:
    wide: bool = False
    show_all: bool = False
    topology: bool = False
    json_output: bool = False
    help: bool = False


def parse_args(argv: Sequence[str]) -> Options:
    """go-flags parsing; raises :class:`UsageError` with go-flags' message."""
    return Options(**parse_bool_flags(argv, _OPTIONS, PROG))


def fetch_inventory(client: DaemonClient, command: str) -> Inventory:
    """The daemon's inventory, seen while this tool holds the devices open (as the real one does)."""
    with ToolSession(client, command):
        return inventory_from_dict(client.get("/inventory"))


def main(argv: Sequence[str] | None = None) -> int:
    argv = arguments(argv)
    try:
        opts = parse_args(argv)
    except UsageError as exc:
        return print_go_flags_error(str(exc))  # go-flags prints parse errors on stdout
    if opts.help:
        return show_help(USAGE)
    try:
        with stop_signals():
            return _list(opts, argv)
    except STOPPED as exc:  # Ctrl-C or SIGTERM while the daemon answers: the shell's 128 + signal
        return stopped_status(exc)


def _list(opts: Options, argv: list[str]) -> int:
    from neurontools.ls.render import render_json, render_text

    try:
        client = DaemonClient()
        inventory = fetch_inventory(client, " ".join([PROG, *argv]))
    except (DaemonUnavailable, AddressError) as exc:
        return print_logfmt_error(str(exc))
    except (DaemonError, InventoryError) as exc:
        return print_logfmt_error(f"unexpected answer from the Neuron emulator daemon: {exc}")

    if opts.json_output:
        out = render_json(inventory, wide=opts.wide, show_all=opts.show_all)
    else:
        out = render_text(inventory, wide=opts.wide, show_all=opts.show_all, topology=opts.topology)
    try:
        sys.stdout.write(out)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (neuron-ls | head): not an error worth a traceback
        silence_stdout()
    return 0
