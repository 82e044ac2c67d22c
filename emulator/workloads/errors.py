"""How a run reports an error on stderr: ``neuron-emulator: error: MESSAGE``.

Some runtime messages span several lines (the out-of-memory report lists the core's usage). A
torchrun worker therefore writes its error as one JSON-encoded line (``ERROR_JSON_PREFIX``) that
the launcher decodes and prints once, however many ranks hit the same error, while holding back
torchrun's own output.
"""

from __future__ import annotations

import json
import os
import sys

PROG = "neuron-emulator"
ERROR_PREFIX = f"{PROG}: error: "
ERROR_JSON_PREFIX = f"{PROG}: error-json: "
FORMAT_ENV = "NEURON_EMULATOR_ERROR_FORMAT"  # "json" in workers started by the launcher


def report_error(message: str) -> None:
    as_json = os.environ.get(FORMAT_ENV) == "json"
    print(ERROR_JSON_PREFIX + json.dumps(message) if as_json else ERROR_PREFIX + message, file=sys.stderr, flush=True)


def decode_error_line(line: str) -> str | None:
    """The message of a worker's error line, ``None`` for any other line."""
    if line.startswith(ERROR_JSON_PREFIX):
        try:
            message = json.loads(line[len(ERROR_JSON_PREFIX) :])
        except ValueError:
            return None
        return message if isinstance(message, str) else None
    if line.startswith(ERROR_PREFIX):
        return line[len(ERROR_PREFIX) :]
    return None
