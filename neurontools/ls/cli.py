"""``neuron-ls``: list the Neuron devices of this host and the processes holding them.

Command-line behaviour follows the real Go tool (docs/reference/neuron-ls.md §Command line): go-flags style
options, bad flags reported on stdout with exit 1, no device/daemon reported as one logfmt line
on stderr with exit 1 and nothing on stdout.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from neurontools.inventory import Inventory, InventoryError, inventory_from_dict
from neurontools.messages import one_line
from neurontools.sources.address import AddressError
from neurontools.sources.daemon_client import DaemonClient, DaemonError, DaemonUnavailable
from neurontools.sources.tool_session import ToolSession

PROG = "neuron-ls"

_OPTIONS = (
    # (short, long, attribute, help)
    ("w", "wide", "wide", "Displays the table in a wider format."),
    (
        "a",
        "show-all-procs",
        "show_all",
        "Show all processes using the Neuron Devices, including processes that aren't using "
        "Neuron Runtime 2.x such as neuron-monitor or neuron-ls",
    ),
    ("t", "topology", "topology", "Display topology information about the system's Neuron Devices."),
    ("j", "json-output", "json_output", "Output in JSON format"),
)

USAGE = (
    "Usage:\n"
    f"  {PROG} [OPTIONS]\n"
    "\n"
    "Application Options:\n" + "".join(f"  -{s}, --{lng:<16}{text}\n" for s, lng, _, text in _OPTIONS) + "\n"
    "Help Options:\n"
    "  -h, --help            Show this help message\n"
    "\n"
    "Environment:\n"
    "  NEURON_EMULATOR_ADDR  emulator daemon address (socket path or http://127.0.0.1:PORT)\n"
)


class UsageError(Exception):
    pass


@dataclass
class Options:
    wide: bool = False
    show_all: bool = False
    topology: bool = False
    json_output: bool = False
    help: bool = False


def parse_args(argv: Sequence[str]) -> Options:
    opts = Options()
    by_short = {s: attr for s, _, attr, _ in _OPTIONS}
    by_long = {lng: attr for _, lng, attr, _ in _OPTIONS}
    for arg in argv:
        if arg in ("-h", "--help"):
            opts.help = True
        elif arg.startswith("--"):
            name, eq, _ = arg[2:].partition("=")
            if name == "help" and eq:
                raise UsageError("bool flag `help' cannot have an argument")
            if name not in by_long:
                raise UsageError(f"unknown flag `{name}'")
            if eq:
                raise UsageError(f"bool flag `{name}' cannot have an argument")
            setattr(opts, by_long[name], True)
        elif arg.startswith("-") and len(arg) > 1:
            for ch in arg[1:]:
                if ch == "h":
                    opts.help = True
                elif ch in by_short:
                    setattr(opts, by_short[ch], True)
                else:
                    raise UsageError(f"unknown flag `{ch}'")
        else:
            raise UsageError(f"unexpected argument `{arg}' ({PROG} takes no arguments)")
    return opts


def _logfmt_error(message: str) -> None:
    escaped = one_line(message.replace("\\", "\\\\").replace('"', '\\"'))
    print(f'level=error msg="{escaped}"', file=sys.stderr)


def fetch_inventory(client: DaemonClient, command: str) -> Inventory:
    """The daemon's inventory, seen while this tool holds the devices open (as the real one does)."""
    with ToolSession(client, command):
        return inventory_from_dict(client.get("/inventory"))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        opts = parse_args(argv)
    except UsageError as exc:
        print(one_line(str(exc)))  # go-flags prints parse errors on stdout
        return 1
    if opts.help:
        sys.stdout.write(USAGE)
        return 0

    from neurontools.ls.render import render_json, render_text

    try:
        client = DaemonClient()
        inventory = fetch_inventory(client, " ".join([PROG, *argv]))
    except (DaemonUnavailable, AddressError) as exc:
        _logfmt_error(str(exc))
        return 1
    except (DaemonError, InventoryError) as exc:
        _logfmt_error(f"unexpected answer from the Neuron emulator daemon: {exc}")
        return 1

    if opts.json_output:
        out = render_json(inventory, wide=opts.wide, show_all=opts.show_all)
    else:
        out = render_text(inventory, wide=opts.wide, show_all=opts.show_all, topology=opts.topology)
    try:
        sys.stdout.write(out)
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away (neuron-ls | head): not an error worth a traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 0
