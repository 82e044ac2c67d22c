"""``neuron-profile capture --pid PID``: profile running processes through the emulator daemon
(docs/profiling.md). The PID is a runtime process attached to the daemon, or a launcher whose
descendants are; each is asked for ``steps`` profiled steps (``POST /v1/processes/{pid}/profile``)
and polled (``GET`` the same path) until every one is done or failed, or the timeout passes."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from neurontools.cli import CliError
from neurontools.sources.daemon_client import DaemonError

DONE, FAILED = "done", "failed"
POLL_INTERVAL = 0.5


class ProfileApi(Protocol):
    """What the capture needs from a daemon client (``DaemonClient`` or a fake in tests)."""

    def get(self, path: str) -> Any: ...

    def post(self, path: str, body: Any) -> Any: ...


@dataclass(frozen=True)
class Progress:
    pid: int
    state: str
    dirs: tuple[str, ...]
    error: str | None = None


def attached_pids(client: ProfileApi) -> set[int]:
    answer = client.get("/processes")
    items = answer.get("processes", answer) if isinstance(answer, dict) else answer
    if not isinstance(items, list):
        raise CliError("unexpected answer from the daemon to GET /v1/processes")
    return {int(p["pid"]) for p in items if isinstance(p, dict) and isinstance(p.get("pid"), int)}


def descendants(pid: int) -> set[int]:
    """The processes ``pid`` started, at any depth (none when it is gone)."""
    import psutil

    try:
        return {c.pid for c in psutil.Process(pid).children(recursive=True)}
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return set()


def targets(client: ProfileApi, pid: int, children: Callable[[int], set[int]] = descendants) -> list[int]:
    """``pid`` if it is attached to the daemon, else its attached descendants."""
    attached = attached_pids(client)
    if pid in attached:
        return [pid]
    found = sorted(children(pid) & attached)
    if not found:
        raise CliError(f"process {pid} is not attached to the Neuron emulator daemon, nor is any process it started")
    return found


def start(client: ProfileApi, pids: Iterable[int], steps: int, output_dir: str) -> None:
    body = {"steps": steps, "output_dir": str(Path(output_dir).resolve())}
    for pid in pids:
        try:
            client.post(f"/processes/{pid}/profile", body)
        except DaemonError as exc:
            reason = {404: "is not attached to the daemon", 409: "is already being profiled"}.get(exc.status, str(exc))
            raise CliError(f"process {pid} {reason}") from None


def poll(client: ProfileApi, pid: int) -> Progress:
    answer = client.get(f"/processes/{pid}/profile")
    if not isinstance(answer, dict) or not isinstance(answer.get("state"), str):
        raise CliError(f"unexpected answer from the daemon to GET /v1/processes/{pid}/profile")
    dirs = tuple(str(d) for d in answer.get("dirs") or ())
    return Progress(pid, answer["state"], dirs, answer.get("error"))


def wait(
    client: ProfileApi,
    pids: list[int],
    timeout: float,
    report: Callable[[Progress], None],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Progress]:
    """Poll every pid until all are done or failed; CliError when ``timeout`` passes first."""
    deadline = clock() + timeout
    last: dict[int, Progress] = {}
    while True:
        for pid in pids:
            if pid in last and last[pid].state in (DONE, FAILED):
                continue
            now = poll(client, pid)
            if last.get(pid) != now:
                report(now)
            last[pid] = now
        if all(last[p].state in (DONE, FAILED) for p in pids):
            return [last[p] for p in pids]
        if clock() >= deadline:
            pending = ", ".join(f"{p} ({last[p].state})" for p in pids if last[p].state not in (DONE, FAILED))
            raise CliError(f"timed out after {timeout:g} s waiting for the profile of {pending}")
        sleep(POLL_INTERVAL)
