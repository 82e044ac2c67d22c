"""neuron-top's command line: ``neuron-top [--interval SECONDS] [--source - | ADDRESS]``.

The real tool takes no options and, since 2.20, rejects unknown arguments with an error and a
clean exit; here every bad flag or value gets one line on stderr and exit status 1
(``neurontools.cli``, argparse-like style).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from neurontools.cli import RaisingParser, number_in_range

PROG = "neuron-top"
DEFAULT_INTERVAL = 1.0
MIN_INTERVAL = 0.1
MAX_INTERVAL = 3600.0
STDIN = "-"

USAGE = f"""Usage:
  {PROG} [OPTIONS]

Options:
  --interval SECONDS  time between two refreshes from the daemon (default: {DEFAULT_INTERVAL:g};
                      {MIN_INTERVAL:g} to {MAX_INTERVAL:g})
  --source SOURCE     '-' reads neuron-monitor reports (one JSON object per line) on standard
                      input, e.g. 'neuron-monitor | {PROG} --source -'; anything else is a daemon
                      address (socket path or http://127.0.0.1:PORT)
                      (default: NEURON_EMULATOR_ADDR, else the default socket)
  --version           print the version and exit
  -h, --help          show this help and exit

Keys: q quit, 1-9 select tab, a/d previous/next tab, f FLOPS on/off, e engines on/off,
      s history on/off, p processes on/off, arrows/enter/x memory tree
"""


@dataclass(frozen=True)
class Options:
    interval: float = DEFAULT_INTERVAL
    source: str | None = None  # None: the default daemon address; "-": standard input
    help: bool = False
    version: bool = False

    @property
    def from_stdin(self) -> bool:
        return self.source == STDIN


_interval = number_in_range(
    float,
    MIN_INTERVAL,
    MAX_INTERVAL,
    invalid="invalid value {text!r} (expected seconds, e.g. 1 or 0.5)",
    out_of_range=f"{{text}} is out of range (expected {MIN_INTERVAL:g} to {MAX_INTERVAL:g})",
)


def _source(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("empty source (expected '-' or a daemon address)")
    return text


def parse_args(argv: Sequence[str]) -> Options:
    """Raises :class:`UsageError` for a bad flag or value."""
    parser = RaisingParser(prog=PROG, add_help=False, allow_abbrev=False)
    parser.add_argument("--interval", type=_interval, default=DEFAULT_INTERVAL)
    parser.add_argument("--source", type=_source)
    parser.add_argument("--version", action="store_true")
    parser.add_argument("-h", "--help", action="store_true")
    ns = parser.parse_args(list(argv))
    return Options(interval=ns.interval, source=ns.source, help=ns.help, version=ns.version)
