"""Attach this process to the emulated instance, as ``nrt_init`` does on a real Trn1 host.

The first call registers the process with the daemon (PID, full command line, tag, runtime
version) and claims NeuronCores from ``NEURON_RT_VISIBLE_CORES`` / ``NEURON_RT_NUM_CORES`` /
torchrun's ``LOCAL_RANK``; a process in a Kubernetes pod also says which one (``POD_NAME``,
``POD_NAMESPACE``, ``CONTAINER_NAME``: docs/kubernetes.md). Later calls return the same
session. The cores are released at exit; if the process dies without running exit handlers
(``kill -9``), the daemon notices and releases them itself. A restarted daemon is noticed
within a second or two and the process registers again with what it holds
(:class:`RuntimeSession`, docs/lifecycle.md).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import psutil

from emulator.runtime.core_spec import CoreSpecError, format_core_ids, request_from_env
from emulator.runtime.errors import NeuronRuntimeError
from neurontools.contract.inventory import RUNTIME, NeuronProcess, process_from_dict
from neurontools.sources.address import AddressError
from neurontools.sources.daemon_client import DaemonClient, DaemonError, DaemonUnavailable
from neurontools.sources.registration import Registration

# Version string the emulated Neuron runtime reports (neuron-ls RUNTIME VERSION column); the
# value used by the reference neuron-ls examples (docs/reference/trn1-runtime.md §Version strings of the examples).
RUNTIME_VERSION = "2.29.14"
MAX_TAG_LENGTH = 255  # NEURON_PROCESS_TAG limit of Runtime 2.x (docs/reference/neuron-monitor.md §Process tags)


# The Kubernetes container this process runs in, as a pod spec passes it (docs/kubernetes.md): the
# downward API's metadata.name and metadata.namespace, the container's name written as a value.
POD_NAME_ENV = "POD_NAME"
POD_NAMESPACE_ENV = "POD_NAMESPACE"
CONTAINER_NAME_ENV = "CONTAINER_NAME"
DEFAULT_NAMESPACE = "default"  # where Kubernetes puts a pod whose manifest names no namespace

HEARTBEAT_S = 1.0  # how often a training process makes sure the daemon still knows it
ABSENT_HEARTBEAT_S = 0.25  # while no daemon answers: a refused connect costs ~50 us, so look often
HEARTBEAT_TIMEOUT_S = 2.0  # a request of the heartbeat waits at most this long
MIN_CHECK_GAP_S = 0.1  # failed reports wake the heartbeat; it checks at most this often
ResumeState = dict[str, list[dict[str, Any]]]


def _log(level: str, message: str) -> None:
    """One line on stderr in the runtime's log format (what users grep for on real hosts)."""
    stamp = time.strftime("%Y-%b-%d %H:%M:%S")
    print(f"{stamp} {os.getpid()}:{threading.get_ident()} {level:<6} NRT:{message}", file=sys.stderr, flush=True)


def _log_error(message: str) -> None:
    _log("ERROR", message)


def _cores_text(cores: tuple[int, ...]) -> str:
    return format_core_ids(cores) if cores else "no NeuronCores"


class RuntimeSession:
    """This process's attachment to the daemon, kept across daemon restarts (docs/lifecycle.md).

    A heartbeat thread checks about once a second that the daemon it registered with still runs —
    a look at that process in /proc, no request — and failed execution reports wake it early. When
    the daemon is gone it says so once on stderr and the process keeps running; when a daemon
    answers again and does not know this process, the process registers again with the same PID
    and NeuronCores, and with the device memory and loaded models it holds (:meth:`set_resume`).
    If another process took one of its cores meanwhile, the runtime fails: an NRT log line now,
    :meth:`raise_if_failed` (the next execution) raises, :attr:`failure_fd` becomes readable.
    """

    def __init__(self, client: DaemonClient, process: NeuronProcess, owner_pid: int, body: Mapping[str, Any]) -> None:
        self.client = client
        self.process = process
        self.owner_pid = owner_pid
        self.failure: NeuronRuntimeError | None = None
        self.absent = False  # the daemon did not answer at the last check
        self._registration = Registration(
            DaemonClient(client.address, timeout=HEARTBEAT_TIMEOUT_S),
            {
                **body,
                "visible_cores": list(process.neuroncores),  # the same cores again, or a refusal
                "origin": "the NeuronCores this process held before the daemon restarted",
            },
        )
        self._registration.body.pop("num_cores", None)
        self._registration.registered = True
        self._resume: Callable[[], ResumeState | None] | None = None
        self._on_register: list[Callable[[], None]] = []
        self._daemon = self._daemon_process()
        self._suspect = False
        self._checked = 0.0
        self._check_lock = threading.Lock()  # one check at a time; close() waits for it
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._failure_r, self._failure_w = os.pipe()
        self._thread = threading.Thread(target=self._heartbeat, name="neuron-rt-heartbeat", daemon=True)

    @property
    def neuroncores(self) -> tuple[int, ...]:
        return self.process.neuroncores

    # -- what a re-registration carries ------------------------------------------------------
    def set_resume(self, state: Callable[[], ResumeState | None]) -> None:
        """``state()``: the device memory and loaded models to register again with (AttachBody.resume)."""
        self._resume = state

    def on_register(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` right before each re-registration request: a new daemon's counters
        start from zero (a report made before the request is refused by that daemon, one made
        after counts from here)."""
        self._on_register.append(callback)

    # -- failures ----------------------------------------------------------------------------
    def suspect(self) -> None:
        """A report failed (no daemon, or it does not know this process): check soon."""
        if not self.absent:
            self._suspect = True
            self._wake.set()

    def raise_if_failed(self) -> None:
        if self.failure is not None:
            raise self.failure

    @property
    def failure_fd(self) -> int:
        """Readable once the runtime has failed (for a select loop)."""
        return self._failure_r

    # -- the heartbeat -----------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def _heartbeat(self) -> None:
        while not self._stop.is_set() and self.failure is None:
            self._wake.wait(ABSENT_HEARTBEAT_S if self.absent else HEARTBEAT_S)
            self._wake.clear()
            gap = MIN_CHECK_GAP_S - (time.monotonic() - self._checked)
            if gap > 0 and self._stop.wait(gap):
                return
            self.check()

    def _daemon_process(self) -> psutil.Process | None:
        """The daemon's process, to watch it through /proc (None: unknown, or not visible from here)."""
        try:
            return psutil.Process(int(self._registration.client.get("/status")["daemon_pid"]))
        except (DaemonError, DaemonUnavailable, psutil.Error, KeyError, TypeError, ValueError):
            return None

    def _daemon_alive(self) -> bool:
        daemon = self._daemon
        try:  # is_running() compares the start time: a recycled PID is not our daemon
            return daemon is not None and daemon.is_running() and daemon.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def check(self) -> None:
        """One heartbeat: nothing if the daemon we registered with still runs and no report
        failed; else make sure a daemon knows this process (register again if need be)."""
        with self._check_lock:
            self._checked = time.monotonic()
            if self._stop.is_set() or self.failure is not None:
                return
            if not self._suspect and not self.absent and self._daemon_alive():
                return
            self._suspect = False
            self._refresh()

    def _refresh(self) -> None:
        address = self.client.address
        cores = _cores_text(self.neuroncores)
        try:
            answer = self._registration.refresh(self._resume_body)
        except DaemonUnavailable as exc:
            if not self.absent:
                self.absent = True
                self._daemon = None
                _log(
                    "WARN",
                    f"nrt_heartbeat no Neuron emulator daemon answers at {address} ({exc.reason}); "
                    f"this process keeps running and registers {cores} again when one does",
                )
            return
        except DaemonError as exc:
            status = str(exc.body.get("nrt_status") or "NRT_FAILURE")
            _log_error(f"nrt_heartbeat {exc}")
            self.failure = NeuronRuntimeError(
                status,
                f"{exc} (this process held {cores} before the daemon at {address} restarted "
                "and could not register them again)",
            )
            os.write(self._failure_w, b"!")
            return
        was_absent, self.absent = self.absent, False
        self._daemon = self._daemon_process()
        if answer is not None:
            _log("INFO", f"nrt_heartbeat registered again with the daemon at {address}: PID {self.owner_pid}, {cores}")
        elif was_absent:
            _log("INFO", f"nrt_heartbeat the daemon at {address} answers again")

    def _resume_body(self) -> dict[str, Any]:
        for callback in self._on_register:
            callback()
        state = self._resume() if self._resume is not None else None
        return {"resume": state} if state else {}

    def close(self) -> None:
        """Stop the heartbeat (waiting for a check under way) and release the cores."""
        self._stop.set()
        self._wake.set()
        with self._check_lock:
            self._registration.unregister()
        for fd in (self._failure_r, self._failure_w):
            with contextlib.suppress(OSError):
                os.close(fd)


_lock = threading.Lock()
_session: RuntimeSession | None = None


def _command_line() -> str:
    try:
        return " ".join(psutil.Process().cmdline())
    except psutil.Error:
        return " ".join(sys.argv)


def pod_from_env(env: Mapping[str, str]) -> dict[str, str] | None:
    """The attach request's ``pod`` from the environment: None without ``POD_NAME``."""
    name = env.get(POD_NAME_ENV, "")
    if not name:
        return None
    return {
        "pod_name": name,
        "namespace": env.get(POD_NAMESPACE_ENV, "") or DEFAULT_NAMESPACE,
        "container_name": env.get(CONTAINER_NAME_ENV, ""),
    }


def attach(env: Mapping[str, str] | None = None) -> RuntimeSession:
    """Register with the daemon and claim NeuronCores once per process; return the session."""
    global _session
    env = os.environ if env is None else env
    with _lock:
        if _session is not None and _session.owner_pid == os.getpid():
            return _session
        _session = None  # a forked child does not inherit its parent's cores

        try:
            request = request_from_env(env)
        except CoreSpecError as exc:
            _log_error(f"nrt_init Invalid NeuronCore selection: {exc}")
            raise NeuronRuntimeError("NRT_INVALID", str(exc)) from None
        tag = env.get("NEURON_PROCESS_TAG", "")
        if len(tag) > MAX_TAG_LENGTH:
            raise NeuronRuntimeError("NRT_INVALID", f"NEURON_PROCESS_TAG is longer than {MAX_TAG_LENGTH} characters")

        try:
            client = DaemonClient()
        except AddressError as exc:
            raise NeuronRuntimeError("NRT_FAILURE", str(exc)) from None
        body: dict[str, Any] = {
            "pid": os.getpid(),
            "command": _command_line(),
            "tag": tag,
            "runtime_version": RUNTIME_VERSION,
            "kind": RUNTIME,
            "origin": request.origin,
        }
        if request.visible_cores is not None:
            body["visible_cores"] = list(request.visible_cores)
        if request.num_cores is not None:
            body["num_cores"] = request.num_cores
        pod = pod_from_env(env)
        if pod is not None:
            body["pod"] = pod
        try:
            answer = client.post("/processes", body)
        except DaemonUnavailable as exc:
            _log_error(f"nrt_init Failed to open the Neuron devices: {exc}")
            raise NeuronRuntimeError("NRT_FAILURE", str(exc)) from None
        except DaemonError as exc:
            status = str(exc.body.get("nrt_status") or "NRT_FAILURE")
            _log_error(str(exc))
            raise NeuronRuntimeError(status, str(exc)) from None

        _session = RuntimeSession(client, process_from_dict(answer), os.getpid(), body)
        _session.start()
        return _session


def current_session() -> RuntimeSession | None:
    with _lock:
        if _session is not None and _session.owner_pid == os.getpid():
            return _session
        return None


def detach() -> None:
    """Release this process's cores now (also runs at interpreter exit)."""
    global _session
    with _lock:
        session, _session = _session, None
    if session is None or session.owner_pid != os.getpid():
        return
    session.close()  # daemon gone or already released us: nothing to do


atexit.register(detach)
