"""What every command does before its work: take its arguments, answer ``--help`` and ``--version``."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from neurontools import __version__
from neurontools.cli.output import write_line


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
