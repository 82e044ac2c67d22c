"""Profile requests for running processes (docs/profiling.md §Profiling a running process).

``neuron-profile capture --pid PID --steps N`` asks the daemon; the daemon hands the request to
the process in the answer to its next execution report (it has no other channel to it: a real
runtime would get it from its profiler service); the process captures ``N`` steps and reports
the capture directories back. One request at a time per process::

    pending --(an execution answer carries it)--> capturing --(the process reports)--> done | failed
       \\_____________________(the process detaches or exits)___________________________/ -> failed

Thread-safe (the routes and the reaper call in). Finished requests are kept for reading back,
the :data:`KEEP_FINISHED` most recent ones.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

PENDING, CAPTURING, DONE, FAILED = "pending", "capturing", "done", "failed"
KEEP_FINISHED = 256


class ProfileConflict(Exception):
    """A request the state does not allow (one already running, a report for another)."""


@dataclass
class ProfileRequest:
    id: int
    pid: int
    steps: int
    output_dir: str
    state: str = PENDING
    dirs: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def open(self) -> bool:
        return self.state in (PENDING, CAPTURING)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "pid": self.pid,
            "id": self.id,
            "state": self.state,
            "steps": self.steps,
            "output_dir": self.output_dir,
            "dirs": list(self.dirs),
        }
        if self.error is not None:
            out["error"] = self.error
        return out

    def directive(self) -> dict[str, Any]:
        """What the process is handed in an execution answer."""
        return {"id": self.id, "steps": self.steps, "output_dir": self.output_dir}


class ProfileRequests:
    """The latest profile request of each process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._latest: dict[int, ProfileRequest] = {}

    def request(self, pid: int, steps: int, output_dir: str) -> ProfileRequest:
        """A new request for ``pid``; ProfileConflict while one is pending or capturing."""
        with self._lock:
            current = self._latest.get(pid)
            if current is not None and current.open:
                raise ProfileConflict(f"process {pid} already has a profile request {current.state} (id {current.id})")
            self._latest.pop(pid, None)  # re-inserted last: the dict keeps request order
            self._latest[pid] = req = ProfileRequest(next(self._ids), pid, steps, output_dir)
            self._forget_old()
            return _copy(req)

    def _forget_old(self) -> None:
        finished = [pid for pid, r in self._latest.items() if not r.open]
        for pid in finished[: max(0, len(finished) - KEEP_FINISHED)]:
            del self._latest[pid]

    def get(self, pid: int) -> ProfileRequest | None:
        with self._lock:
            req = self._latest.get(pid)
            return None if req is None else _copy(req)

    def hand_out(self, pid: int) -> dict[str, Any] | None:
        """The directive for ``pid``'s execution answer, once: pending -> capturing."""
        with self._lock:
            req = self._latest.get(pid)
            if req is None or req.state != PENDING:
                return None
            req.state = CAPTURING
            return req.directive()

    def finish(self, pid: int, request_id: int, dirs: list[str], error: str | None) -> ProfileRequest:
        """The process reports request ``request_id`` done (or failed, with ``error``). KeyError:
        no such request; ProfileConflict: it is not capturing."""
        with self._lock:
            req = self._latest.get(pid)
            if req is None or req.id != request_id:
                raise KeyError(f"process {pid} has no profile request {request_id}")
            if req.state != CAPTURING:
                raise ProfileConflict(f"profile request {request_id} of process {pid} is {req.state}, not capturing")
            req.state = DONE if error is None else FAILED
            req.dirs = list(dirs)
            req.error = error
            return _copy(req)

    def gone(self, pid: int, reason: str) -> None:
        """Process ``pid`` detached or exited: its open request fails."""
        with self._lock:
            req = self._latest.get(pid)
            if req is not None and req.open:
                was = req.state
                req.state, req.error = FAILED, f"{reason} while the request was {was}"


def _copy(req: ProfileRequest) -> ProfileRequest:
    return ProfileRequest(req.id, req.pid, req.steps, req.output_dir, req.state, list(req.dirs), req.error)
