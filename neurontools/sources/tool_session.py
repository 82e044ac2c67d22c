"""A monitoring tool holding the Neuron devices open, so ``neuron-ls -a`` can list it.

On a real host every tool opens ``/dev/neuron*`` and therefore shows up in ``neuron-ls -a`` with
runtime version ``NA``. Here the tool registers with the daemon as kind ``tool`` (no cores) for
as long as it runs. Registration is best effort: a tool that cannot register still works.
"""

from __future__ import annotations

import contextlib
import os
from types import TracebackType

from neurontools.inventory import NOT_A_RUNTIME, TOOL
from neurontools.sources.daemon_client import DaemonClient, DaemonError, DaemonUnavailable


class ToolSession:
    def __init__(self, client: DaemonClient, command: str) -> None:
        self.client = client
        self.command = command
        self.registered = False

    def open(self) -> None:
        body = {
            "pid": os.getpid(),
            "command": self.command,
            "tag": os.environ.get("NEURON_PROCESS_TAG", "")[:255],
            "runtime_version": NOT_A_RUNTIME,
            "kind": TOOL,
        }
        try:
            self.client.post("/processes", body)
            self.registered = True
        except DaemonError:
            self.registered = False  # e.g. the daemon cannot see our PID: list without ourselves

    def ensure(self) -> bool:
        """Register if this tool is not (or no longer: a restarted daemon forgets it) known to the
        daemon. Returns False when the daemon cannot be reached, so the caller tries again later."""
        try:
            if self.registered and self._known():
                return True
            self.open()
        except DaemonUnavailable:
            return False
        return True

    def _known(self) -> bool:
        try:
            self.client.get(f"/processes/{os.getpid()}")
        except DaemonError as exc:
            return exc.status != 404  # another refusal: registering again would not fix it
        return True

    def close(self) -> None:
        if not self.registered:
            return
        self.registered = False
        with contextlib.suppress(DaemonError, DaemonUnavailable):  # daemon gone: nothing of ours to free
            self.client.delete(f"/processes/{os.getpid()}")

    def __enter__(self) -> ToolSession:
        self.open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
