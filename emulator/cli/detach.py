"""Starting a foreground command again in the background (``up --detach``, ``cluster up --detach``):
its log file, the detached child, and the child's last word when it fails to start."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from typing import BinaryIO

from neurontools.cli import CliError

PROG = "neuron-emulator"


def open_log(path: str) -> BinaryIO:
    """The child's log (appended, mode 0600); one clear line if it cannot be opened."""
    try:
        return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
    except OSError as exc:
        raise CliError(f"cannot open log file {path}: {exc.strerror}") from None


def spawn(argv: Sequence[str], log: BinaryIO) -> subprocess.Popen[bytes]:
    """``neuron-emulator ARGV`` in a new session (it outlives this command), output to ``log``."""
    return subprocess.Popen(
        [sys.executable, "-m", "emulator.cli", *argv],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
        close_fds=True,
    )


def last_line(path: str) -> str:
    """The log's last line without the error prefix: why the child stopped."""
    try:
        with open(path, "rb") as fh:
            lines = [ln.strip() for ln in fh.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].removeprefix(f"{PROG}: error: ") if lines else ""
