"""The one-line error printers, one per style a re-implemented tool uses.

* argparse-like (neuron-monitor, neuron-top, neuron-exporter, neuron-monitor-prometheus,
  neuron-emulator): ``prog: error: MESSAGE`` on stderr, with ``(see prog --help)`` after a bad
  flag;
* go-flags (neuron-ls, docs/reference/neuron-ls.md §Command line): the parser's message alone on
  **stdout**, e.g. ``unknown flag `x'``;
* logfmt (neuron-ls's runtime errors): ``level=error msg="MESSAGE"`` on stderr.

Every message goes through :func:`neurontools.messages.one_line`, so input quoted in it cannot
break the line (docs/fuzzing.md).
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TextIO

from neurontools.messages import one_line


def write_line(stream: TextIO | None, text: str) -> None:
    """``text`` and a newline, flushed; a closed or missing stream is not worth dying for."""
    if stream is None:
        return
    with contextlib.suppress(OSError, ValueError):
        stream.write(text + "\n")
        stream.flush()


def error_line(prog: str, message: str) -> str:
    return f"{prog}: error: {one_line(message)}"


def print_error(prog: str, message: str, status: int = 1) -> int:
    """``prog: error: MESSAGE`` on stderr; returns ``status`` (the exit status to return)."""
    write_line(sys.stderr, error_line(prog, message))
    return status


def print_usage_error(prog: str, message: str, status: int = 1, *, quoted: bool = False) -> int:
    """A bad flag, argparse-like: ``prog: error: MESSAGE (see prog --help)`` on stderr (``quoted``:
    ``(see 'prog --help')``); returns ``status``."""
    command = f"'{prog} --help'" if quoted else f"{prog} --help"
    return print_error(prog, f"{message} (see {command})", status)


def print_go_flags_error(message: str) -> int:
    """A bad flag, go-flags style: the message alone on stdout, exit status 1."""
    write_line(sys.stdout, one_line(message))
    return 1


def print_logfmt_error(message: str) -> int:
    """A runtime error, logfmt style: ``level=error msg="MESSAGE"`` on stderr, exit status 1."""
    escaped = one_line(message.replace("\\", "\\\\").replace('"', '\\"'))
    write_line(sys.stderr, f'level=error msg="{escaped}"')
    return 1


def silence_stdout(out: TextIO | None = None) -> None:
    """The reader closed stdout (``tool | head``): point it at /dev/null so that the final flush at
    exit stays silent instead of printing a BrokenPipeError."""
    try:
        fd = (out if out is not None else sys.stdout).fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
