"""``neuron-profile``'s command line: the verbs and their flags (docs/profiling.md §Viewing)."""

from __future__ import annotations

import argparse

from neurontools.cli import RaisingParser, number_in_range

FORMATS = ("summary-text", "summary-json", "json", "perfetto", "chrome-json")
DEVICE_PROFILES = ("0", "1", "model", "session")

USAGE = """\
Usage:
  neuron-profile view (-d DIR | -s FILE) [-n GRAPH] [--output-format FORMAT] [--output-file F]
  neuron-profile show-session -s FILE
  neuron-profile inspect -o DIR [-n MAXEVENTS] [--device-profile 0|1|model|session] -- CMD ARGS...
  neuron-profile capture -n GRAPH [-s OUT] [--num-exec N] [--profile-nth-exec K] [-o DIR]
  neuron-profile capture --pid PID [--steps N] [-o DIR] [--timeout S]

Formats: summary-text (default), summary-json, json, perfetto (ntff.pftrace),
chrome-json (neuron_profile.pt.trace.json; a directory: one rank-N.pt.trace.json per process)

Options:
  -h, --help     Show this help message
  --version      Show the version
"""

_positive = number_in_range(
    int, 1, 10**9, invalid="invalid count {text!r} (expected a positive integer)", out_of_range="{value} is not >= 1"
)
_events = number_in_range(
    int, 0, 10**12, invalid="invalid event count {text!r}", out_of_range="{value} is out of range"
)
_seconds = number_in_range(
    float, 0.1, 86400.0, invalid="invalid timeout {text!r} (seconds)", out_of_range="timeout {text} is out of range"
)


def parser(prog: str) -> argparse.ArgumentParser:
    top = RaisingParser(prog=prog, add_help=False, allow_abbrev=False)
    top.add_argument("-h", "--help", action="store_true")
    top.add_argument("--version", action="store_true")
    verbs = top.add_subparsers(dest="verb", parser_class=RaisingParser)

    view = verbs.add_parser("view", add_help=False, allow_abbrev=False)
    view.add_argument("-d", dest="directory")
    view.add_argument("-s", dest="session")
    view.add_argument("-n", dest="graph")
    view.add_argument("--output-format", choices=FORMATS, default="summary-text")
    view.add_argument("--output-file")

    session = verbs.add_parser("show-session", add_help=False, allow_abbrev=False)
    session.add_argument("-s", dest="session", required=True)

    inspect = verbs.add_parser("inspect", add_help=False, allow_abbrev=False)
    inspect.add_argument("-o", dest="output_dir", default="./output")
    inspect.add_argument("-n", dest="max_events", type=_events)
    inspect.add_argument("--device-profile", choices=DEVICE_PROFILES)
    inspect.add_argument("command", nargs=argparse.REMAINDER)

    capture = verbs.add_parser("capture", add_help=False, allow_abbrev=False)
    capture.add_argument("-n", dest="graph")
    capture.add_argument("-s", dest="session_file")
    capture.add_argument("--num-exec", type=_positive, default=1)
    capture.add_argument("--profile-nth-exec", type=_positive, default=1)
    capture.add_argument("-o", dest="output_dir")
    capture.add_argument("--pid", type=_positive)
    capture.add_argument("--steps", type=_positive, default=1)
    capture.add_argument("--timeout", type=_seconds, default=300.0)
    for sub in (view, session, inspect, capture):
        sub.add_argument("-h", "--help", action="store_true")
        sub.set_defaults(version=False)
    return top
