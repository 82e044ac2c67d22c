"""argparse for the argparse-like tools: a bad flag raises :class:`UsageError` (one line, the
tool's own exit status) instead of argparse's usage dump and exit 2."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NoReturn, TypeVar

from neurontools.cli.errors import UsageError


class RaisingParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors (and its subparsers', when given as ``parser_class``)
    raise ``UsageError(message, prog=<the refusing parser's prog>)``."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, prog=self.prog)


Number = TypeVar("Number", int, float)


def number_in_range(
    convert: Callable[[str], Number], low: Number, high: Number, *, invalid: str, out_of_range: str
) -> Callable[[str], Number]:
    """An argparse ``type``: ``convert(text)`` from ``low`` to ``high`` (so never NaN or infinite).
    Each tool words its refusals: ``invalid`` (the text is not a number) and ``out_of_range`` are
    ``str.format`` templates of ``text`` and ``value``."""

    def parse(text: str) -> Number:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(invalid.format(text=text)) from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(out_of_range.format(text=text, value=value))
        return value

    return parse


# A collection interval in seconds (neuron-exporter's --interval, each cluster node's exporter).
MIN_INTERVAL = 0.1
MAX_INTERVAL = 3600.0
interval_seconds = number_in_range(
    float,
    MIN_INTERVAL,
    MAX_INTERVAL,
    invalid="invalid interval {text!r} (expected seconds, e.g. 1 or 0.5)",
    out_of_range=f"interval {{text}} is out of range (expected {MIN_INTERVAL:g} to {MAX_INTERVAL:g} seconds)",
)

# A TCP port, 0 (any free one) to 65535.
port_number = number_in_range(
    int,
    0,
    65535,
    invalid="invalid port {text!r} (expected an integer 0-65535)",
    out_of_range="port {value} is out of range (expected 0-65535)",
)
