"""Attach this process to the emulated instance, as ``nrt_init`` does on a real Trn1 host.

The first call registers the process with the daemon (PID, full command line, tag, runtime
version) and claims NeuronCores from ``NEURON_RT_VISIBLE_CORES`` / ``NEURON_RT_NUM_CORES`` /
torchrun's ``LOCAL_RANK``. Later calls return the same session. The cores are released at exit;
if the process dies without running exit handlers (``kill -9``), the daemon notices and
releases them itself.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

import psutil

from emulator.runtime.core_spec import CoreSpecError, request_from_env
from emulator.runtime.errors import NeuronRuntimeError
from neurontools.inventory import RUNTIME, NeuronProcess, process_from_dict
from neurontools.sources.address import AddressError
from neurontools.sources.daemon_client import DaemonClient, DaemonError, DaemonUnavailable

# Version string the emulated Neuron runtime reports (neuron-ls RUNTIME VERSION column); the
# value used by the spec's neuron-ls examples (spec/neuron-tools.md §1.5-§1.6).
RUNTIME_VERSION = "2.29.14"
MAX_TAG_LENGTH = 255  # NEURON_PROCESS_TAG limit of Runtime 2.x (spec/neuron-tools.md §3.2)


@dataclass
class RuntimeSession:
    client: DaemonClient
    process: NeuronProcess
    owner_pid: int

    @property
    def neuroncores(self) -> tuple[int, ...]:
        return self.process.neuroncores


_lock = threading.Lock()
_session: RuntimeSession | None = None


def _log_error(message: str) -> None:
    """One line on stderr in the runtime's log format (what users grep for on real hosts)."""
    stamp = time.strftime("%Y-%b-%d %H:%M:%S")
    print(f"{stamp} {os.getpid()}:{threading.get_ident()} ERROR  NRT:{message}", file=sys.stderr, flush=True)


def _command_line() -> str:
    try:
        return " ".join(psutil.Process().cmdline())
    except psutil.Error:
        return " ".join(sys.argv)


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
        body = {
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
        try:
            answer = client.post("/processes", body)
        except DaemonUnavailable as exc:
            _log_error(f"nrt_init Failed to open the Neuron devices: {exc}")
            raise NeuronRuntimeError("NRT_FAILURE", str(exc)) from None
        except DaemonError as exc:
            status = str(exc.body.get("nrt_status") or "NRT_FAILURE")
            _log_error(str(exc))
            raise NeuronRuntimeError(status, str(exc)) from None

        _session = RuntimeSession(client=client, process=process_from_dict(answer), owner_pid=os.getpid())
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
    with contextlib.suppress(DaemonUnavailable, DaemonError):  # daemon gone or already released us
        session.client.delete(f"/processes/{session.owner_pid}")


atexit.register(detach)
