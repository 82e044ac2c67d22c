"""``neuron-emulator workloads``: the built-in workloads, one line each."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from emulator.cli.args import Handler
from emulator.workloads import WORKLOADS, WorkloadSpec


def add(sub: Any) -> dict[str, Handler]:
    sub.add_parser("workloads", help="list the built-in workloads", description="List the built-in workloads.")
    return {"workloads": cmd_workloads}


def workload_lines(workloads: Mapping[str, WorkloadSpec] = WORKLOADS) -> list[str]:
    rows = [("NAME", "KIND", "DEFAULTS", "DESCRIPTION")]
    for spec in workloads.values():
        shape = f"batch {spec.batch_size}" + (f" x seq {spec.seq_len}" if spec.seq_len else "")
        defaults = f"{spec.steps} steps, {shape}, {spec.dtype}"
        rows.append((spec.name, spec.kind, defaults, spec.description))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}" for r in rows]


def cmd_workloads(args: argparse.Namespace) -> int:
    for line in workload_lines():
        print(line)
    return 0
