"""A process's registration with the daemon (``POST /v1/processes``), kept across daemon restarts.

The daemon keeps its registry in memory: a restarted daemon has forgotten every process. Whoever
registered — a tool holding the devices open (:mod:`neurontools.sources.tool_session`), a training
process holding NeuronCores (``emulator.runtime.attach``) — calls :meth:`Registration.refresh`
when it suspects that, and is registered again if the daemon does not know it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from neurontools.sources.daemon_client import DaemonApi, DaemonError, DaemonUnavailable


class Registration:
    """``body`` is the registration request (``pid``, ``command``, ``kind``, ...)."""

    def __init__(self, client: DaemonApi, body: Mapping[str, Any]) -> None:
        self.client = client
        self.body = dict(body)
        self.registered = False

    @property
    def pid(self) -> int:
        return int(self.body["pid"])

    def register(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Register (``extra``: fields added to this request only); the daemon's answer.
        Raises :class:`DaemonUnavailable`, or :class:`DaemonError` when the daemon refuses."""
        answer = self.client.post("/processes", {**self.body, **(extra or {})})
        self.registered = True
        return answer

    def known(self) -> bool:
        """Does the daemon list this process? A refusal other than 404 counts as yes: registering
        again would not fix it. Raises :class:`DaemonUnavailable`."""
        try:
            self.client.get(f"/processes/{self.pid}")
        except DaemonError as exc:
            return exc.status != 404
        return True

    def refresh(self, extra: Callable[[], Mapping[str, Any]] | None = None) -> dict[str, Any] | None:
        """Make sure the daemon knows this process: None if it did, else register (again) and
        return the daemon's answer (``extra()``: fields for that request). Raises as :meth:`register`."""
        if self.registered and self.known():
            return None
        return self.register(extra() if extra is not None else None)

    def unregister(self) -> None:
        """Leave the registry (best effort: a daemon that is gone holds nothing of ours)."""
        if not self.registered:
            return
        self.registered = False
        with contextlib.suppress(DaemonError, DaemonUnavailable):
            self.client.delete(f"/processes/{self.pid}")
