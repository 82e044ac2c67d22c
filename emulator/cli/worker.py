"""One rank of a data-parallel run, started by torchrun: ``python -m emulator.cli.worker NAME ...``.

Takes the same training flags as ``neuron-emulator run`` (the core selection arrives through
``NEURON_RT_VISIBLE_CORES`` and torchrun's ``LOCAL_RANK``); rank 0 reports progress.

A worker dies with torchrun (docs/lifecycle.md): it asks for SIGTERM when its parent dies and
exits at once if torchrun — or, under ``neuron-emulator run``, the launcher above it — is gone
already. SIGTERM keeps its default action (immediate exit: a rank blocked in a collective could
not run a Python handler); the daemon releases its cores within a second.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence

from emulator.cli.args import ArgumentError
from emulator.cli.training import add_training_arguments, config_from_args, run_environment
from emulator.lifecycle import die_with_parent, launcher_pid
from emulator.workloads.errors import report_error


def main(argv: Sequence[str] | None = None) -> int:
    die_with_parent(signal.SIGTERM, grandparent=launcher_pid())
    parser = argparse.ArgumentParser(prog="python -m emulator.cli.worker")
    add_training_arguments(parser)
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ArgumentError as exc:
        report_error(str(exc))
        return 1
    os.environ.update(run_environment(args, os.environ))  # --auto-cast -> NEURON_CC_FLAGS
    from emulator.workloads.runner import run

    return run(config)


if __name__ == "__main__":
    sys.exit(main())
