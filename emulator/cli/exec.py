"""``neuron-emulator exec -- CMD ...``: run any command with the emulator's torch_xla,
torch_neuronx and neuronx_distributed first on the import path (docs/run-your-script.md).

The command replaces this process (``exec``), so its exit status, its signals and its children
are the command's own: ``exec -- torchrun --nproc_per_node=2 train.py`` is torchrun, with
``PYTHONPATH`` starting with ``emulator/shims`` and ``PATH`` with ``emulator/shims/bin``
(``neuron_parallel_compile``) and this Python's own ``bin`` (so ``python`` and ``torchrun`` are
the ones that have the emulator installed). Outside ``exec`` the shims are on no path and never
shadow a real torch_xla. The emulated instance must be running (``neuron-emulator up``); a
command that cannot start is one line on stderr and status 127, as a shell says it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import Any

from emulator.cli.args import Handler
from emulator.compat.shim_path import shim_environment
from neurontools.cli import CliError, UsageError
from neurontools.sources.daemon_client import DaemonClient, DaemonUnavailable

NOT_FOUND_STATUS = 127


def add(sub: Any) -> dict[str, Handler]:
    p = sub.add_parser(
        "exec",
        help="run a command (python, torchrun, neuron_parallel_compile ...) with the emulator's torch_xla, "
        "torch_neuronx and neuronx_distributed: unmodified torch-neuronx training scripts",
        description="Runs CMD with the emulator's torch_xla, torch_neuronx and neuronx_distributed packages first "
        "on the import path, against the running emulated instance (start it with 'neuron-emulator up'). "
        "Example: neuron-emulator exec -- torchrun --nproc_per_node=2 train.py. Supported names: "
        "docs/run-your-script.md.",
    )
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD [ARG ...]", help="the command to run")
    return {"exec": run_exec}


def run_exec(args: argparse.Namespace) -> int:
    argv = list(args.argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        raise UsageError("exec: give the command to run, e.g. neuron-emulator exec -- python train.py")
    client = DaemonClient(timeout=3.0)
    try:
        client.get("/status")
    except DaemonUnavailable as exc:
        raise CliError(str(exc)) from None  # says how to start one
    env = shim_environment(os.environ)
    program = shutil.which(argv[0], path=env["PATH"])
    if program is None:
        print(f"neuron-emulator exec: {argv[0]}: command not found", file=sys.stderr)
        return NOT_FOUND_STATUS
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(program, argv, env)
    except OSError as exc:
        print(f"neuron-emulator exec: {argv[0]}: {exc.strerror}", file=sys.stderr)
        return NOT_FOUND_STATUS if exc.errno == 2 else 126
    return 0  # not reached: execve does not return
