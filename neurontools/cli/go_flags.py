"""Boolean options parsed as the Go tools' parser (``jessevdk/go-flags``) does, with its messages
(docs/reference/neuron-ls.md §Command line): ``-w``, ``--wide``, combined short flags (``-ja``),
``-h``/``--help``; a bad one raises :class:`UsageError` with go-flags' wording, for
:func:`neurontools.cli.output.print_go_flags_error`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from neurontools.cli.errors import UsageError

HELP = "help"


@dataclass(frozen=True)
class BoolFlag:
    short: str  # one letter, without the dash
    long: str  # without the dashes
    attr: str  # the name it is returned under
    help: str


def parse_bool_flags(argv: Sequence[str], flags: Sequence[BoolFlag], prog: str) -> dict[str, bool]:
    """Which flags are set (keyed by ``attr``, plus ``"help"``); the program takes no arguments."""
    values = dict.fromkeys([*(f.attr for f in flags), HELP], False)
    by_short = {f.short: f.attr for f in flags}
    by_long = {f.long: f.attr for f in flags}
    for arg in argv:
        if arg in ("-h", "--help"):
            values[HELP] = True
        elif arg.startswith("--"):
            name, eq, _ = arg[2:].partition("=")
            if name == HELP and eq:
                raise UsageError(f"bool flag `{HELP}' cannot have an argument")
            if name not in by_long:
                raise UsageError(f"unknown flag `{name}'")
            if eq:
                raise UsageError(f"bool flag `{name}' cannot have an argument")
            values[by_long[name]] = True
        elif arg.startswith("-") and len(arg) > 1:
            for ch in arg[1:]:
                if ch == "h":
                    values[HELP] = True
                elif ch in by_short:
                    values[by_short[ch]] = True
                else:
                    raise UsageError(f"unknown flag `{ch}'")
        else:
            raise UsageError(f"unexpected argument `{arg}' ({prog} takes no arguments)")
    return values


def flag_lines(flags: Sequence[BoolFlag]) -> str:
    """The ``Application Options`` lines of go-flags' usage text."""
    return "".join(f"  -{f.short}, --{f.long:<16}{f.help}\n" for f in flags)
