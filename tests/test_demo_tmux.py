"""`neuron-emulator demo` as a person runs it: in a terminal (tmux), then `q`; nothing is left behind.

Each test has a tmux server of its own (a socket in its directory): the demo's processes inherit
this session's TMPDIR (tests/conftest.py), so its neuron-demo-* directory, and the processes that
use it, are this test's alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.support import BIN, free_port, wait_until

TMUX = shutil.which("tmux")
pytestmark = pytest.mark.skipif(TMUX is None, reason="tmux not installed")


def tmux(tmp: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``tmux argv`` on the test's own server (socket in ``tmp``)."""
    return subprocess.run(["tmux", "-S", str(tmp / "tmux.sock"), *argv], capture_output=True, text=True)


def pane(tmp: Path, session: str) -> str:
    return tmux(tmp, "capture-pane", "-p", "-t", session).stdout


def demo_dirs() -> str:
    """Where this session's demos make their neuron-demo-* directory (tempfile: TMPDIR)."""
    return os.path.join(os.environ["TMPDIR"], "neuron-demo-")


def demo_processes() -> list[psutil.Process]:
    """The demo's daemon (its socket is in a neuron-demo-* directory) and every process that
    talks to it (training launchers, replaying ranks, the exporter: NEURON_EMULATOR_ADDR)."""
    ours = demo_dirs()
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        try:
            addr = proc.environ().get("NEURON_EMULATOR_ADDR", "") if "emulator" in cmd or "neuron-" in cmd else ""
        except psutil.Error:
            addr = ""
        if ours in cmd or ours in addr:
            found.append(proc)
    return found


def demo_in_tmux(tmp: Path, port: int, then: str = "") -> str:
    """``neuron-emulator demo`` (trn1.2xlarge, mlp, the exporter on ``port``) in a new detached
    120x40 tmux terminal, followed by the shell commands ``then``; the session's name."""
    session = f"nt-demo-{time.monotonic_ns()}"
    command = (
        f"PATH={BIN}:$PATH NEURON_COMPILE_CACHE_URL={tmp / 'cache'} neuron-emulator demo "
        f"--instance-type trn1.2xlarge --workload mlp --exporter-port {port}{then}"
    )
    started = tmux(tmp, "new-session", "-d", "-s", session, "-x", "120", "-y", "40", command)
    assert started.returncode == 0, started.stderr
    return session


def test_demo_runs_everything_and_q_stops_it(short_tmp: Path) -> None:
    port = free_port()
    done = short_tmp / "exit"
    session = demo_in_tmux(short_tmp, port, then=f"; echo $? > {done}; sleep 60")
    try:
        assert wait_until(lambda: "mlp" in pane(short_tmp, session), timeout=90, interval=0.5), pane(short_tmp, session)
        # the model-scale job beside it: one replaying rank on core 0 (BERT-Large, DP1)
        assert wait_until(lambda: "bert-large-rank0" in pane(short_tmp, session), timeout=120, interval=0.5), pane(
            short_tmp, session
        )
        screen = pane(short_tmp, session)
        assert "neuron-top" in screen and "(trn1.2xlarge)" in screen
        assert "ND0" in screen and "NeuronCore v2 Utilization" in screen
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            assert b"neuroncore_busy_seconds_total" in resp.read()  # the exporter runs beside it
        assert demo_processes(), "the demo's daemon and workload should be running"
        assert tmux(short_tmp, "send-keys", "-t", session, "q").returncode == 0
        assert wait_until(done.exists, timeout=30, interval=0.2), pane(short_tmp, session)
        assert done.read_text().strip() == "0"
        assert wait_until(lambda: demo_processes() == [], timeout=5), demo_processes()
        assert not list(Path(os.environ["TMPDIR"]).glob("neuron-demo-*/neuron-emulator.sock"))
    finally:
        tmux(short_tmp, "kill-server")


def test_closing_the_terminal_stops_the_demo_too(short_tmp: Path) -> None:
    """SIGHUP (the terminal went away) must not orphan the daemon, the jobs or the exporter."""
    session = demo_in_tmux(short_tmp, free_port())
    try:
        assert wait_until(lambda: "mlp" in pane(short_tmp, session), timeout=90, interval=0.5), pane(short_tmp, session)
        assert wait_until(lambda: len(demo_processes()) >= 4, timeout=60), demo_processes()
    finally:
        tmux(short_tmp, "kill-server")  # SIGHUP to the demo
    assert wait_until(lambda: demo_processes() == [], timeout=20), demo_processes()
