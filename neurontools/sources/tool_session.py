"""A monitoring tool holding the Neuron devices open, so ``neuron-ls -a`` can list it.

On a real host every tool opens ``/dev/neuron*`` and therefore shows up in ``neuron-ls -a`` with
runtime version ``NA``. Here the tool registers with the daemon as kind ``tool`` (no cores) for
as long as it runs. Registration is best effort: a tool that cannot register still works.
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any

from neurontools.contract.inventory import NOT_A_RUNTIME, TOOL
from neurontools.sources.daemon_client import DaemonApi, DaemonError, DaemonUnavailable
from neurontools.sources.registration import Registration


class ToolSession(Registration):
    def __init__(self, client: DaemonApi, command: str) -> None:
        self.command = command
        super().__init__(client, self._body())

    def _body(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "command": self.command,
            "tag": os.environ.get("NEURON_PROCESS_TAG", "")[:255],
            "runtime_version": NOT_A_RUNTIME,
            "kind": TOOL,
        }

    def open(self) -> None:
        self.body = self._body()
        try:
            self.register()
        except DaemonError:
            self.registered = False  # e.g. the daemon cannot see our PID: list without ourselves

    def ensure(self) -> bool:
        """Register if this tool is not (or no longer: a restarted daemon forgets it) known to the
        daemon. Returns False when the daemon cannot be reached, so the caller tries again later."""
        try:
            self.refresh()
        except DaemonUnavailable:
            return False
        except DaemonError:
            self.registered = False
        return True

    def close(self) -> None:
        self.unregister()  # daemon gone: nothing of ours to free

    def __enter__(self) -> ToolSession:
        self.open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
