"""``neuron-emulator demo``: a daemon, a parallel job over most cores, a real-math workload,
neuron-exporter and neuron-top in one terminal (:func:`emulator.demo.run_demo`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from emulator.cli.args import Handler, add_instance_type, tcp_port
from neurontools.cli import CliError


def add(sub: Any) -> dict[str, Handler]:
    demo = sub.add_parser(
        "demo",
        help="daemon + a parallel job over most cores + real training + neuron-exporter on :8000 + neuron-top; "
        "q stops all of it",
    )
    add_instance_type(demo, "trn1.32xlarge")
    demo.add_argument(
        "--workload",
        default="gpt-tiny",
        metavar="NAME",
        help="real-math workload beside the parallel job (default gpt-tiny)",
    )
    demo.add_argument(
        "--exporter-port", type=int, default=8000, metavar="N", help="neuron-exporter port (default 8000)"
    )
    return {"demo": _cmd_demo}


def _cmd_demo(args: argparse.Namespace) -> int:
    from emulator.demo import run_demo
    from emulator.workloads import WORKLOADS

    if args.workload not in WORKLOADS or not WORKLOADS[args.workload].real_math:
        real = ", ".join(name for name, spec in WORKLOADS.items() if spec.real_math)
        raise CliError(f"--workload {args.workload!r}: the demo's second job is a real-math workload ({real})")
    tcp_port("--exporter-port", args.exporter_port)
    if not sys.stdout.isatty():
        raise CliError("demo runs neuron-top in the foreground and needs a terminal")
    return run_demo(args.instance_type, args.workload, args.exporter_port)
