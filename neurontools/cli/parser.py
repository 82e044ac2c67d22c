"""argparse for the argparse-like tools: a bad flag raises :class:`UsageError` (one line, the
tool's own exit status) instead of argparse's usage dump and exit 2."""

from __future__ import annotations

import argparse
from typing import NoReturn

from neurontools.cli.errors import UsageError


class RaisingParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors (and its subparsers', when given as ``parser_class``)
    raise ``UsageError(message, prog=<the refusing parser's prog>)``."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, prog=self.prog)


def port_number(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535 (an argparse ``type``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r} (expected an integer 0-65535)") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is out of range (expected 0-65535)")
    return value
