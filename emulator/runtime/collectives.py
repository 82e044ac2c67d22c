"""Host-side collectives of a data-parallel run (torch.distributed over gloo): their timeout, and
the one-line error a rank gives when its peers are gone or stuck (docs/lifecycle.md).

A peer killed outright closes its sockets: the surviving rank's collective fails at once. A peer
that is alive but never joins (stopped, hung) is given ``NEURON_EMULATOR_COLLECTIVE_TIMEOUT``
seconds (default 60), gloo's process-group timeout; then the rank fails instead of waiting forever.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping

from emulator.runtime.errors import NeuronRuntimeError

COLLECTIVE_TIMEOUT_ENV = "NEURON_EMULATOR_COLLECTIVE_TIMEOUT"
DEFAULT_COLLECTIVE_TIMEOUT_S = 60.0
_SOURCE_PREFIX = re.compile(r"^\[[^\]]*\.(?:cc|cpp|h):\d+\]\s*")  # "[.../gloo/transport/tcp/pair.cc:553] "


def collective_timeout(env: Mapping[str, str] | None = None) -> float:
    """Seconds a collective may wait for the other ranks; ValueError (one line) for a bad value."""
    text = (os.environ if env is None else env).get(COLLECTIVE_TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_COLLECTIVE_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{COLLECTIVE_TIMEOUT_ENV}={text!r}: expected a positive number of seconds, like 60 or 2.5")
    return value


def _gloo_reason(exc: BaseException) -> str:
    """The first sentence of gloo's message, without its source-file prefix."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    text = _SOURCE_PREFIX.sub("", text)
    return text.split(". ", 1)[0].rstrip(".")


def collective_error(exc: BaseException, what: str, *, rank: int, timeout: float) -> NeuronRuntimeError:
    """The runtime error for a failed host collective (``what``: "the gradient all-reduce", ...)."""
    reason = _gloo_reason(exc)
    if "timed out" in reason.lower() or "timeout" in reason.lower():
        return NeuronRuntimeError(
            "NRT_TIMEOUT",
            f"rank {rank}: {what} got no answer from the other ranks within {timeout:g} s "
            f"({COLLECTIVE_TIMEOUT_ENV}); a peer rank is stuck or gone (gloo: {reason})",
        )
    return NeuronRuntimeError("NRT_FAILURE", f"rank {rank}: {what} failed: a peer rank is gone (gloo: {reason})")
