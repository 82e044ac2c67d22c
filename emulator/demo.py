"""``neuron-emulator demo``: the whole product in one command.

Starts a daemon on a private socket (default trn1.32xlarge), a model-scale parallel job over most
of its NeuronCores at the hardware's pace (GPT3-6.7B TP8xDP3 on cores 0-23 of a trn1.32xlarge;
BERT-Large on core 0 of a trn1.2xlarge), a real-math workload whose loss falls on the next core,
``neuron-exporter`` on :8000, and ``neuron-top`` in the foreground. When neuron-top exits (``q``)
or the user presses Ctrl-C, everything started here is stopped and the socket directory removed:
no process or socket is left behind. The first run waits for the parallel job's simulated
compile (its graphs then sit in the persistent compile cache, and later runs start at once).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from neurontools.sources.address import parse_address
from neurontools.sources.daemon_client import DaemonClient, DaemonError, DaemonUnavailable

DEFAULT_WORKLOAD = "gpt-tiny"
EXPORTER_PORT = 8000
# The model-scale job of each instance type (run flags) and the first core left for the real-math job.
PARALLEL_JOBS: dict[str, tuple[list[str], int]] = {
    "trn1.32xlarge": (["gpt3-6.7b", "--tp", "8", "--dp", "3", "--global-batch", "48"], 24),
    "trn1n.32xlarge": (["gpt3-6.7b", "--tp", "8", "--dp", "3", "--global-batch", "48"], 24),
    "trn1.2xlarge": (["bert-large", "--dp", "1", "--micro-batch", "16", "--global-batch", "128"], 1),
}


def _bin(name: str) -> str:
    """A console script next to this interpreter (the venv's), else on PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else (shutil.which(name) or name)


class Demo:
    def __init__(self, instance_type: str, workload: str, exporter_port: int) -> None:
        self.instance_type = instance_type
        self.workload = workload
        self.exporter_port = exporter_port
        self.workdir = Path(tempfile.mkdtemp(prefix="neuron-demo-"))
        self.socket = str(self.workdir / "neuron-emulator.sock")
        self.env = {**os.environ, "NEURON_EMULATOR_ADDR": self.socket}
        self.children: list[subprocess.Popen] = []
        self.log = self.workdir / "demo.log"

    def _spawn(self, argv: list[str], **kw: Any) -> subprocess.Popen:
        log = open(self.log, "ab")  # noqa: SIM115 - handed to the child
        proc = subprocess.Popen(
            argv,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # Ctrl-C in neuron-top reaches the demo, which stops them in order
            preexec_fn=_die_with_parent,
            **kw,
        )
        log.close()
        self.children.append(proc)
        return proc

    def _wait_for_daemon(self, daemon: subprocess.Popen, timeout: float = 30) -> None:
        client = DaemonClient(parse_address(self.socket), timeout=1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if daemon.poll() is not None:
                raise RuntimeError(f"the daemon exited ({self._log_tail()})")
            with contextlib.suppress(DaemonUnavailable, DaemonError):
                client.get("/status")
                return
            time.sleep(0.05)
        raise RuntimeError("the daemon did not answer within 30 s")

    def _log_tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        return lines[-1] if lines else "no log"

    def start(self) -> None:
        daemon = self._spawn(
            [_bin("neuron-emulator"), "up", "--instance-type", self.instance_type, "--socket", self.socket]
        )
        self._wait_for_daemon(daemon)
        job, free_core = PARALLEL_JOBS[self.instance_type]
        self._spawn([_bin("neuron-emulator"), "run", *job, "--steps", "1000000"])
        self._spawn([_bin("neuron-emulator"), "run", self.workload, "--cores", str(free_core), "--steps", "1000000"])
        self._spawn([_bin("neuron-exporter"), "--port", str(self.exporter_port)])

    def stop(self) -> None:
        for proc in reversed(self.children):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.children:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


@contextlib.contextmanager
def running_demo(instance_type: str, workload: str, exporter_port: int) -> Iterator[Demo]:
    demo = Demo(instance_type, workload, exporter_port)
    try:
        demo.start()
        yield demo
    finally:
        demo.stop()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _die_with_parent() -> None:
    """In a child, before exec: SIGTERM when the demo dies, even by SIGKILL (Linux prctl)."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def run_demo(instance_type: str, workload: str = DEFAULT_WORKLOAD, exporter_port: int = EXPORTER_PORT) -> int:
    """Run the demo with neuron-top in the foreground; returns neuron-top's exit status."""
    # SIGTERM, and SIGHUP when its terminal goes away: stop everything started here first
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        with running_demo(instance_type, workload, exporter_port) as demo:
            print(
                f"neuron-emulator demo: {instance_type} at {demo.socket}: {' '.join(PARALLEL_JOBS[instance_type][0])} "
                f"and {workload} training, neuron-exporter on http://127.0.0.1:{exporter_port}/metrics; q quits",
                flush=True,
            )
            top = subprocess.run([_bin("neuron-top")], env=demo.env, check=False)
            return top.returncode
    except KeyboardInterrupt:
        return 130
    except RuntimeError as exc:
        print(f"neuron-emulator: error: demo: {exc}", file=sys.stderr)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
