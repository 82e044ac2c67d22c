"""What every command does before its work: take its arguments, answer ``--help`` and ``--version``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TextIO, TypeVar

from neurontools import __version__
from neurontools.cli.errors import UsageError
from neurontools.cli.output import print_usage_error, write_line

Options = TypeVar("Options")


def arguments(argv: Sequence[str] | None) -> list[str]:
    """The command's arguments: ``argv`` when given (tests), else the process's own."""
    return list(sys.argv[1:] if argv is None else argv)


def show_help(usage: str, out: TextIO | None = None) -> int:
    """The usage text as it is (it ends with its own newline) on stdout; exit status 0."""
    write_line(out if out is not None else sys.stdout, usage.removesuffix("\n"))
    return 0


def show_version(prog: str, out: TextIO | None = None) -> int:
    """``prog VERSION`` on stdout; exit status 0."""
    write_line(out if out is not None else sys.stdout, f"{prog} {__version__}")
    return 0


def help_or_version(opts: object, prog: str, usage: str, out: TextIO | None = None) -> int | None:
    """Exit status 0 once the usage (``opts.help``) or the version (``opts.version``) is printed;
    ``None`` when neither was asked for."""
    if getattr(opts, "help", False):
        return show_help(usage, out)
    if getattr(opts, "version", False):
        return show_version(prog, out)
    return None


def options_or_status(
    parse: Callable[[list[str]], Options], argv: list[str], prog: str, usage: str, out: TextIO | None = None
) -> Options | int:
    """The parsed options, or the exit status once a usage error (one line, ``prog: error: ...``),
    the usage or the version is printed: the argparse-style preamble of neuron-monitor,
    neuron-top and neuron-exporter."""
    try:
        opts = parse(argv)
    except UsageError as exc:
        return print_usage_error(prog, str(exc))
    done = help_or_version(opts, prog, usage, out)
    return opts if done is None else done
