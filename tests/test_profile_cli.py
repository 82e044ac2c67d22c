"""neuron-profile's command line, in-process: bad input is one line and a non-zero exit; the
verbs that run something are checked against fakes (no emulator, no daemon)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from neurontools.cli import CliError
from neurontools.contract import profile as p
from neurontools.profile import daemon_capture as dc
from neurontools.profile import run
from neurontools.profile.cli import main
from neurontools.sources.daemon_client import DaemonError
from tests import profile_support as ps
from tests.support import BIN, reap, wait_until


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("neuron-profile: error: "), err
    return err


def test_view_formats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(ps.two_ranks(tmp_path / "out"))
    assert main(["view", "-d", out]) == 0
    assert "TensorE" in capsys.readouterr().out
    assert main(["view", "-d", out, "--output-format", "summary-json", "-n", "abc123"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc) == ["summary", "collective_groups"]
    assert [r["rank"] for r in doc["summary"]] == [0, 1]
    ((group),) = doc["collective_groups"]
    assert (group["replica_group"], group["slowest_rank"], group["outlier_calls"]) == ([0, 1], 1, 1)
    assert main(["view", "-d", out, "--output-format", "json", "--output-file", str(tmp_path / "t.json")]) == 0
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["op_level"] is True and any(t["name"] == "CC-core" for t in doc["tracks"])
    assert main(["view", "-d", out, "--output-format", "perfetto", "--output-file", str(tmp_path / "x.pftrace")]) == 0
    assert (tmp_path / "x.pftrace").stat().st_size > 0


def test_show_session(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = ps.write_process(tmp_path, 9, 0, 0, [ps.execution(1.0, 100)])
    assert main(["show-session", "-s", str(d / p.ntff_file(ps.GRAPH_HASH, 0))]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:4] == ["Model Name: train_step", f"UUID: {ps.GRAPH_HASH}", "Model ID: 0", "NTFF Version: 1"]
    assert lines[5].startswith("NODE ID | EXEC TIME (NS) | EXECUTOR (ND d NC c)")
    assert lines[6].split(" | ")[1].strip() == "500000"


@pytest.mark.parametrize("case", ["missing", "empty", "truncated", "foreign", "graph", "session", "no-neff", "flag"])
def test_bad_input_is_one_line(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    d = ps.write_process(out, 9, 0, 0, [ps.execution(1.0, 100)])
    ntff = d / p.ntff_file(ps.GRAPH_HASH, 0)
    argv = ["view", "-d", str(out)]
    if case == "missing":
        argv = ["view", "-d", str(tmp_path / "nope")]
    elif case == "empty":
        (tmp_path / "empty").mkdir()
        argv = ["view", "-d", str(tmp_path / "empty")]
    elif case == "truncated":
        ntff.write_text(ntff.read_text()[:40])
    elif case == "foreign":
        (d / p.neff_file(ps.GRAPH_HASH)).write_bytes(gzip.compress(b'{"format": "other"}'))
    elif case == "graph":
        argv += ["-n", "nosuch"]
    elif case == "session":
        argv = ["view", "-s", str(tmp_path / "x.ntff")]
    elif case == "no-neff":
        (d / p.neff_file(ps.GRAPH_HASH)).unlink()
        argv = ["view", "-s", str(ntff)]
    else:
        argv = ["view", "--frobnicate"]
    assert main(argv) == 1
    _one_error_line(capsys)


def test_inspect_sets_the_runtime_variables_and_relays_the_status(tmp_path: Path) -> None:
    script = (
        "import os, sys; print(os.environ['NEURON_RT_INSPECT_OUTPUT_DIR'], file=open(sys.argv[1], 'w')); sys.exit(3)"
    )
    marker = tmp_path / "seen"
    code = main(["inspect", "-o", "rel", "-n", "10", "--", sys.executable, "-c", script, str(marker)])
    assert code == 3
    assert Path(marker.read_text().strip()).is_absolute()
    env = run.inspect_env({}, "o", 5, "session")
    assert env["NEURON_RT_INSPECT_ENABLE"] == "1" and env["NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC"] == "5"
    assert env["NEURON_RT_INSPECT_DEVICE_PROFILE"] == "session"


def test_inspect_child_dies_with_the_tool_even_by_sigkill(tmp_path: Path) -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    tool = subprocess.Popen([str(BIN / "neuron-profile"), "inspect", "-o", str(tmp_path), "--", *sleeper])
    child = None
    try:
        assert wait_until(lambda: bool(psutil.Process(tool.pid).children()), timeout=30)
        (child,) = psutil.Process(tool.pid).children()
        tool.kill()  # SIGKILL: no handler of the tool's runs
        tool.wait()
        assert wait_until(lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE, timeout=10)
    finally:
        reap(tool)
        if child is not None and child.is_running():
            child.kill()


def test_capture_without_the_emulator_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    assert main(["capture", "-n", "graph"]) == 1
    assert "neuron-emulator is not installed" in _one_error_line(capsys)


class FakeDaemon:
    """The daemon's profile routes as the brief describes them; each GET advances one state."""

    def __init__(self, attached: set[int], busy: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.attached, self.busy = attached, busy
        self.states: dict[int, list[str]] = {}
        self.posts: list[tuple[str, Any]] = []

    def get(self, path: str) -> Any:
        if path == "/processes":
            return [{"pid": pid} for pid in sorted(self.attached)]
        pid = int(path.split("/")[2])
        states = self.states[pid]
        state = states.pop(0) if len(states) > 1 else states[0]
        return {"pid": pid, "state": state, "steps": 1, "output_dir": "/o", "dirs": [f"/o/i_pid_{pid}"]}

    def post(self, path: str, body: Any) -> Any:
        pid = int(path.split("/")[2])
        if pid not in self.attached:
            raise DaemonError(404, {"error": "not attached"})
        if pid in self.busy:
            raise DaemonError(409, {"error": "already"})
        self.posts.append((path, body))
        self.states[pid] = ["pending", "capturing", "done"]
        return {"pid": pid, "state": "pending", "steps": body["steps"], "output_dir": body["output_dir"]}


def test_capture_pid_expands_a_launcher_and_polls_until_done(tmp_path: Path) -> None:
    fake = FakeDaemon({11, 12, 99})
    pids = dc.targets(fake, 1, children=lambda pid: {11, 12, 13})
    assert pids == [11, 12]
    dc.start(fake, pids, 2, str(tmp_path))
    assert fake.posts[0] == ("/processes/11/profile", {"steps": 2, "output_dir": str(tmp_path.resolve())})
    seen: list[dc.Progress] = []
    done = dc.wait(fake, pids, 10.0, seen.append, clock=lambda: 0.0, sleep=lambda s: None)
    assert [r.state for r in done] == ["done", "done"]
    assert [s.state for s in seen if s.pid == 11] == ["pending", "capturing", "done"]


def test_capture_pid_refusals_and_timeout() -> None:
    with pytest.raises(CliError, match="not attached"):
        dc.targets(FakeDaemon({5}), 1, children=lambda pid: set())
    with pytest.raises(CliError, match="already being profiled"):
        dc.start(FakeDaemon({5}, busy={5}), [5], 1, "/tmp")
    fake = FakeDaemon({5})
    dc.start(fake, [5], 1, "/tmp")
    fake.states[5] = ["capturing"]
    ticks = iter([0.0, 1.0, 5.0])
    with pytest.raises(CliError, match="timed out"):
        dc.wait(fake, [5], 2.0, lambda p: None, clock=lambda: next(ticks), sleep=lambda s: None)
