"""Where the launchers of one job meet: the job id, the common start, every step's end.

A job's ranks run in lockstep (docs/multinode.md): a step ends for everyone when its slowest rank
ends it, as a collective completes only when every member has joined. Each launcher knows when
its own ranks ended the step; the rendezvous gives every launcher the job-wide end.

- :class:`LocalRendezvous`: one launcher drives every node (a cluster on one host): nothing to
  exchange.
- :class:`StoreRendezvous`: one launcher per host, meeting at the c10d ``TCPStore`` that torchrun's
  multi-node rendezvous uses, on ``--master-addr:--master-port`` (node 0's launcher serves it).
  Times cross hosts as wall-clock seconds. A launcher that loses a rank writes ``abort``; a peer
  that never reports a step within the collective timeout is taken for lost.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any, Protocol

START_MARGIN_S = 0.2
POLL_S = 0.02
# How long the members of a collective wait for a peer that does not arrive before the job is
# taken as failed; real jobs wait much longer (minutes), which is no use on an emulator.
PEER_TIMEOUT_ENV = "NEURON_EMULATOR_PEER_TIMEOUT"
DEFAULT_PEER_TIMEOUT_S = 30.0


class JobAborted(RuntimeError):
    """A peer lost a rank, or did not reach a step in time: the message says which."""


def peer_timeout() -> float:
    try:
        value = float(os.environ.get(PEER_TIMEOUT_ENV, DEFAULT_PEER_TIMEOUT_S))
    except ValueError:
        return DEFAULT_PEER_TIMEOUT_S
    return value if value > 0 else DEFAULT_PEER_TIMEOUT_S


class Rendezvous(Protocol):
    job_id: str

    def start(self) -> float:
        """The job's common start time (wall clock), once every launcher's ranks are ready."""
        ...

    def step_end(self, step: int, local_end: float, patience: float) -> float:
        """The job-wide end of ``step`` (wall clock) given this launcher's ranks' end. Waits up to
        ``patience`` seconds past ``local_end`` for the peers; raises :class:`JobAborted`."""
        ...

    def abort(self, message: str) -> None: ...

    def close(self) -> None: ...


def new_job_id(model: str) -> str:
    """``MODEL-YYYYmmdd-HHMMSS-PID``: unique on the host, readable in a dashboard."""
    return f"{model}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


class LocalRendezvous:
    def __init__(self, job_id: str) -> None:
        self.job_id = job_id

    def start(self) -> float:
        return time.time() + START_MARGIN_S

    def step_end(self, step: int, local_end: float, patience: float) -> float:
        return local_end

    def abort(self, message: str) -> None:
        pass

    def close(self) -> None:
        pass


class StoreRendezvous:
    """Node ``node_rank`` of ``nodes`` at the c10d store ``addr:port`` (node 0 serves it)."""

    def __init__(self, model: str, *, nodes: int, node_rank: int, addr: str, port: int, timeout: float) -> None:
        from torch.distributed import TCPStore

        self.nodes = nodes
        self.node_rank = node_rank
        self.where = f"{addr}:{port}"
        self.timeout = timeout
        try:
            self.store: Any = TCPStore(
                addr,
                port,
                nodes,
                node_rank == 0,
                timeout=timedelta(seconds=timeout),
                wait_for_workers=False,
            )
        except Exception as exc:  # torch raises RuntimeError, DistNetworkError, OSError
            raise JobAborted(f"cannot reach the job's c10d store at {self.where}: {_reason(exc)}") from None
        if node_rank == 0:
            self.job_id = new_job_id(model)
            self._set("job_id", self.job_id)
        else:
            self.job_id = self._get("job_id", time.monotonic() + timeout)

    # -- store access, every failure a JobAborted ------------------------------------------------
    def _set(self, key: str, value: str) -> None:
        try:
            self.store.set(key, value)
        except Exception as exc:
            raise JobAborted(f"lost the job's c10d store at {self.where} (node 0): {_reason(exc)}") from None

    def _has(self, keys: list[str]) -> bool:
        try:
            return bool(self.store.check(keys))
        except Exception as exc:
            raise JobAborted(f"lost the job's c10d store at {self.where} (node 0): {_reason(exc)}") from None

    def _read(self, key: str) -> str:
        try:
            return bytes(self.store.get(key)).decode()
        except Exception as exc:
            raise JobAborted(f"lost the job's c10d store at {self.where} (node 0): {_reason(exc)}") from None

    def _get(self, key: str, deadline: float, what: str = "") -> str:
        """``key``'s value once set; JobAborted when a peer aborted or the deadline passes."""
        while True:
            if self._has(["abort"]):
                raise JobAborted(self._read("abort"))
            if self._has([key]):
                return self._read(key)
            if time.monotonic() > deadline:
                raise JobAborted(what or f"timed out waiting for {key!r} at the job's c10d store {self.where}")
            time.sleep(POLL_S)

    # -- the protocol ----------------------------------------------------------------------------
    def start(self) -> float:
        self._set(f"ready/{self.node_rank}", "1")
        deadline = time.monotonic() + self.timeout
        if self.node_rank == 0:
            for node in range(self.nodes):
                self._get(f"ready/{node}", deadline, f"node {node} did not start its ranks within {self.timeout:g} s")
            t0 = time.time() + START_MARGIN_S
            self._set("t0", repr(t0))
            return t0
        return float(self._get("t0", deadline, "node 0 did not start the job"))

    def step_end(self, step: int, local_end: float, patience: float) -> float:
        self._set(f"end/{step}/{self.node_rank}", repr(local_end))
        deadline = time.monotonic() + max(0.0, local_end - time.time()) + patience
        ends = []
        for node in range(self.nodes):
            what = (
                f"node {node} did not reach step {step}'s collectives within {patience:g} s "
                f"({PEER_TIMEOUT_ENV}): the node is lost"
            )
            ends.append(float(self._get(f"end/{step}/{node}", deadline, what)))
        return max(ends)

    def abort(self, message: str) -> None:
        try:
            if not self.store.check(["abort"]):
                self.store.set("abort", message)
        except Exception:  # the store itself is gone: nothing to tell
            pass

    def close(self) -> None:
        """Node 0 serves the store: it stays until every node has said it is done (or gives up)."""
        try:
            self.store.set(f"done/{self.node_rank}", "1")
            if self.node_rank == 0:
                deadline = time.monotonic() + 5.0
                keys = [f"done/{n}" for n in range(self.nodes)]
                while not self.store.check(keys) and not self.store.check(["abort"]) and time.monotonic() < deadline:
                    time.sleep(POLL_S)
        except Exception:
            pass


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
