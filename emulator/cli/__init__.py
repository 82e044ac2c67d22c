"""``neuron-emulator``: the emulated Trn1 instance's command line, one module per command over the
library entry points, and one set of argument types (:mod:`emulator.cli.args`).

Errors follow the argparse-like style of ``neurontools.cli``: one line on stderr, exit 2 for a
flag that cannot be used, 1 for anything else (docs/fuzzing.md); a stop signal during ``run``
exits 128 + the signal (docs/lifecycle.md).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from emulator.cli.args import Handler
from neurontools.cli import CliError, RaisingParser, UsageError, print_error, print_usage_error
from neurontools.sources.address import AddressError
from neurontools.sources.daemon_client import DaemonError

PROG = "neuron-emulator"
USAGE_STATUS = 2  # a flag that cannot be used (UsageError): argparse's exit status


def _adders() -> tuple[Callable[[Any], dict[str, Handler]], ...]:
    """Each command's ``add(subparsers) -> handlers``, in the order ``--help`` lists them."""
    from emulator.cli import bench, cluster, daemon, demo, exec, fault, profile_graph, run, workloads

    return (
        daemon.add_up,
        run.add,
        workloads.add,
        bench.add,
        cluster.add,
        exec.add,
        daemon.add_down_status,
        demo.add,
        fault.add,
        profile_graph.add,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = RaisingParser(  # a parse error is one clear line, not a usage dump
        prog=PROG,
        description="Emulated AWS Trn1 instance: a daemon that real training processes attach to, "
        "and that neuron-ls, neuron-top and neuron-monitor read.",
        epilog="The daemon address is NEURON_EMULATOR_ADDR (a socket path or http://127.0.0.1:PORT), "
        "default $XDG_RUNTIME_DIR/neuron-emulator.sock or /tmp/neuron-emulator-<uid>/daemon.sock. "
        "Access rules: docs/security.md.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=RaisingParser)
    sub.required = True
    handlers: dict[str, Handler] = {}
    for add in _adders():
        handlers.update(add(sub))
    parser.set_defaults(handlers=handlers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:  # raised by the parser of the (sub)command that refused the flag
        return print_usage_error(exc.prog or PROG, str(exc), USAGE_STATUS, quoted=True)
    try:
        return int(args.handlers[args.command](args))
    except UsageError as exc:
        return print_error(PROG, str(exc), USAGE_STATUS)
    except (CliError, AddressError) as exc:
        return print_error(PROG, str(exc))
    except DaemonError as exc:
        return print_error(PROG, f"daemon refused: {exc}")
    except KeyboardInterrupt as exc:  # Ctrl-C, or a stop signal turned into one (docs/lifecycle.md)
        from emulator.lifecycle import exit_status

        return exit_status(exc)


__all__ = ["PROG", "build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
