"""The errors a command reports as one line and a non-zero exit, never a traceback (docs/fuzzing.md)."""

from __future__ import annotations


class CliError(Exception):
    """Bad input, or a start that cannot happen: one line on stderr, then a non-zero exit."""


class UsageError(CliError):
    """A flag, value or argument the command does not take.

    ``prog`` names the (sub)command whose parser refused it (``neuron-emulator up``), when a
    parser raised it; ``str(error)`` is the message alone.
    """

    def __init__(self, message: str, *, prog: str | None = None) -> None:
        super().__init__(message)
        self.prog = prog
