"""Helpers for tests that start the real pieces: a daemon on a temporary socket, real processes
that attach to it, and the real command-line tools."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from neurontools.contract.schema import CORE_MEMORY_KEYS
from neurontools.sources.address import parse_address
from neurontools.sources.daemon_client import DaemonClient, DaemonError, DaemonUnavailable

BIN = Path(sys.executable).parent
HELPERS = Path(__file__).parent / "helpers"
NS_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")

# instance ids of the real neuron-ls outputs (docs/reference/neuron-ls.md §Reference outputs), so goldens
# can be compared with them
SPEC_INSTANCE_IDS = {"trn1.2xlarge": "i-0bea223b1afb7e159", "trn1.32xlarge": "i-0fc767be0ec5465d7"}


# a Kubernetes pod's identity (docs/kubernetes.md): a test run inside a pod must not lend it to every process
POD_ENV = ("POD_NAME", "POD_NAMESPACE", "CONTAINER_NAME")
# the one NEURON_ variable a started process keeps: the session's private compile cache (conftest.py)
KEPT_NEURON_ENV = ("NEURON_COMPILE_CACHE_URL",)


def tool_env(address: str | None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a process a test starts: this one's, without the caller's Neuron and
    rank settings, but with the session's runtime directory and compile cache (conftest.py)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if (k in KEPT_NEURON_ENV or not k.startswith(("NEURON_", "LOCAL_RANK", "RANK", "WORLD_SIZE")))
        and k not in POD_ENV
    }
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    if address is not None:
        env["NEURON_EMULATOR_ADDR"] = address
    env.update(extra or {})
    return env


def run_tool(
    argv: Sequence[str], address: str | None, *, timeout: float = 30, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run a console script (neuron-ls, neuron-emulator, ...) the way a user would."""
    return subprocess.run(
        [str(BIN / argv[0]), *argv[1:]],
        env=tool_env(address, env),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


PROMETHEUS = shutil.which("prometheus")  # .ci/run installs Debian's prometheus


def prometheus_argv(config: Path, tsdb: Path, port: int) -> list[str]:
    """A real Prometheus on 127.0.0.1:``port`` with ``config``, its data in ``tsdb``, quiet."""
    return [
        str(PROMETHEUS),
        f"--config.file={config}",
        f"--storage.tsdb.path={tsdb}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def execution_report(start: float = 0.0, seconds: float = 0.001) -> dict[str, object]:
    """A well-formed, minimal execution report (``POST /v1/processes/{pid}/executions``) on core 0:
    ``seconds`` busy from daemon time ``start``, 1000 FLOPs, completed, no collectives."""
    return {
        "core": 0,
        "start": start,
        "device_seconds": seconds,
        "compute_seconds": seconds,
        "total_latency": seconds,
        "flops": 1000,
        "engines": {},
        "outcome": "completed",
        "model": {"model_id": 10001, "uuid": "u", "name": "m", "code_bytes": 0},
        "compile_cache": {"hits": 1, "misses": 0},
        "collectives": [],
        "memory": {"core": dict.fromkeys(CORE_MEMORY_KEYS, 0), "peak": 0},
    }


def wait_or_kill(proc: subprocess.Popen, timeout: float) -> int:
    """``proc``'s exit code, waiting up to ``timeout`` seconds for it; killed when it takes longer."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def reap(proc: subprocess.Popen) -> None:
    """Kills ``proc`` if it still runs and collects it (its pipes drained): a test's ``finally``."""
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def wait_until(predicate, timeout: float, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


@dataclass
class Daemon:
    address: str
    instance_type: str
    proc: subprocess.Popen[str]
    log: Path

    @property
    def client(self) -> DaemonClient:
        return DaemonClient(parse_address(self.address), timeout=5)

    def answers(self) -> bool:
        try:
            self.client.get("/status")
            return True
        except (DaemonUnavailable, DaemonError):
            return False

    def processes(self) -> list[dict[str, object]]:
        return self.client.get("/processes")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def start_daemon(
    tmp: Path, instance_type: str = "trn1.2xlarge", *, address: str | None = None, extra: Sequence[str] = ()
) -> Daemon:
    """``neuron-emulator up`` in the foreground as a child process; returns once it answers."""
    address = address or str(tmp / "neuron-emulator.sock")
    where = ["--port", address.rsplit(":", 1)[1]] if address.startswith("http://") else ["--socket", address]
    log = tmp / f"daemon-{time.monotonic_ns()}.log"
    argv = [str(BIN / "neuron-emulator"), "up", "--instance-type", instance_type, *where]
    if "--instance-id" not in extra and instance_type in SPEC_INSTANCE_IDS:
        argv += ["--instance-id", SPEC_INSTANCE_IDS[instance_type]]
    argv += list(extra)
    with open(log, "w") as fh:
        proc = subprocess.Popen(argv, env=tool_env(None), stdout=fh, stderr=subprocess.STDOUT, text=True)
    daemon = Daemon(address, instance_type, proc, log)
    if not wait_until(lambda: daemon.answers() or proc.poll() is not None, 30):
        daemon.stop(signal.SIGKILL)
        raise RuntimeError(f"daemon did not answer: {daemon.log_text()}")
    if proc.poll() is not None:
        raise RuntimeError(f"daemon exited {proc.returncode}: {daemon.log_text()}")
    return daemon


# --- processes with chosen PIDs ----------------------------------------------------------------
def can_pin_pids() -> bool:
    return os.geteuid() == 0 and NS_LAST_PID.exists() and os.access(NS_LAST_PID, os.W_OK)


def spawn_pinned(argv: Sequence[str], *, width: int = 4, **popen: object) -> subprocess.Popen[str]:
    """Start ``argv`` with a PID of exactly ``width`` digits (root only: ``ns_last_pid``).

    Goldens then replace the real PID by a canonical one of the same width, so table columns
    come out identical on every run. Retries when another process takes the PID first.
    """
    low, high = 10 ** (width - 1), 10**width - 1
    candidate = low + 1000 if width == 4 else low
    for _ in range(200):
        while candidate <= high and Path(f"/proc/{candidate}").exists():
            candidate += 7
        if candidate > high:
            break
        NS_LAST_PID.write_text(str(candidate - 1))
        proc = subprocess.Popen(list(argv), **popen)  # type: ignore[call-overload]
        if low <= proc.pid <= high:
            return proc
        proc.kill()
        proc.wait()
        candidate += 7
    raise RuntimeError(f"could not get a {width}-digit PID")


@dataclass
class Holder:
    """A real training-script process attached through ``emulator.xla``."""

    proc: subprocess.Popen[str]
    attached: bool
    cores: list[int] = field(default_factory=list)
    stderr: str = ""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def release(self) -> int:
        """Let it exit normally (it waits for end of stdin)."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
        return self.proc.wait(timeout=15)


def start_holder(
    address: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    *,
    pinned: bool = False,
    script: str = "train_monitor.py",
    timeout: float = 60,
) -> Holder:
    """Run ``python3 train_monitor.py`` (a copy of tests/helpers/train_monitor.py in ``cwd``).

    Returns once the process printed that it attached, or exited with an error.
    """
    target = cwd / script
    if not target.exists():
        target.write_text((HELPERS / "train_monitor.py").read_text())
    popen: dict[str, object] = {
        "executable": sys.executable,  # argv[0] stays "python3", as a user would type it
        "cwd": str(cwd),
        "env": tool_env(address, env),
        "stdin": subprocess.PIPE,
        "stdout": subprocess.PIPE,
        "stderr": subprocess.PIPE,
        "text": True,
    }
    argv = ["python3", script]
    proc = spawn_pinned(argv, **popen) if pinned else subprocess.Popen(argv, **popen)  # type: ignore[call-overload]
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    line = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line or proc.poll() is not None:
            break
    if line.startswith("attached "):
        return Holder(proc, True, json.loads(line.split(" ", 1)[1])["neuroncores"])
    proc.wait(timeout=15)
    assert proc.stderr is not None
    return Holder(proc, False, [], proc.stderr.read())


def canonical_pids(text: str, mapping: Mapping[int, int]) -> str:
    """Replace real PIDs (same width) by canonical ones, as whole numbers only."""
    for real, canon in mapping.items():
        assert len(str(real)) == len(str(canon)), (real, canon)
        text = re.sub(rf"(?<![\d.]){real}(?![\d.])", str(canon), text)
    return text


def one_clear_line(stream: str) -> bool:
    lines = [ln for ln in stream.splitlines() if ln.strip()]
    return len(lines) == 1 and "Traceback" not in stream
