"""What the six commands share on their command line (docs/fuzzing.md §Configuration, environment,
command lines): the error types, the one-line error printers in each tool's style, argument
parsers in both styles (argparse-like, go-flags like the Go tools), ``--help``/``--version``,
and SIGTERM/SIGINT turned into a clean exit.

Each tool keeps the exact output of the tool it re-implements, so this package offers styles
rather than one format: ``prog: error: ...`` on stderr (argparse-like), go-flags' bare message on
stdout (neuron-ls), logfmt's ``level=error msg="..."`` on stderr (the Go tools' runtime errors).
"""

from __future__ import annotations

from neurontools.cli.errors import CliError, UsageError
from neurontools.cli.go_flags import BoolFlag, flag_lines, parse_bool_flags
from neurontools.cli.output import (
    error_line,
    print_error,
    print_go_flags_error,
    print_logfmt_error,
    print_usage_error,
    silence_stdout,
    write_line,
)
from neurontools.cli.parser import (
    MAX_INTERVAL,
    MIN_INTERVAL,
    RaisingParser,
    interval_seconds,
    number_in_range,
    port_number,
)
from neurontools.cli.preamble import arguments, help_or_version, options_or_status, show_help, show_version
from neurontools.cli.signals import STOPPED, Terminated, handle_signals, stop_signals, stopped_status

__all__ = [
    "MAX_INTERVAL",
    "MIN_INTERVAL",
    "STOPPED",
    "BoolFlag",
    "CliError",
    "RaisingParser",
    "Terminated",
    "UsageError",
    "arguments",
    "error_line",
    "flag_lines",
    "handle_signals",
    "help_or_version",
    "interval_seconds",
    "number_in_range",
    "options_or_status",
    "parse_bool_flags",
    "port_number",
    "print_error",
    "print_go_flags_error",
    "print_logfmt_error",
    "print_usage_error",
    "show_help",
    "show_version",
    "silence_stdout",
    "stop_signals",
    "stopped_status",
    "write_line",
]
