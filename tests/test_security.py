"""The daemon's access model (docs/security.md), with real daemons, real attached processes and
real tools: the socket's mode and directory, --socket-group, TCP's bearer token and --bind,
self-only attach/release by peer credentials, and the read-only exporter."""

from __future__ import annotations

import grp
import http.client
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from emulator.daemon import security
from emulator.daemon.security import SecurityError, ensure_runtime_dir
from neurontools.sources.address import TOKEN_ENV_VAR, parse_address, resolve_address, token_path
from neurontools.sources.daemon_client import DaemonClient, DaemonError
from tests.support import (
    BIN,
    Daemon,
    Holder,
    execution_report,
    free_port,
    one_clear_line,
    run_tool,
    start_daemon,
    start_holder,
    tool_env,
    wait_until,
)
from tests.test_exporter_app import start_exporter
from tests.test_training_e2e import read_until_done, train

IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root: acts as another user (uid nobody) or chowns")


def tcp_daemon(tmp: Path) -> tuple[Daemon, int]:
    """A daemon on 127.0.0.1 at a free port: (it, the port)."""
    port = free_port()
    return start_daemon(tmp, address=f"http://127.0.0.1:{port}"), port


def mode(path: Path | str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def other_user() -> tuple[int, int]:
    """uid and gid of 'nobody' (a user that is not the daemon's owner)."""
    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


@pytest.fixture
def tcp_env(short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The runtime directory (token files) is the test's own: XDG_RUNTIME_DIR for daemon and clients."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_tmp))
    monkeypatch.delenv(TOKEN_ENV_VAR, raising=False)
    return short_tmp


@pytest.fixture
def group_dir() -> Iterator[Path]:
    """A directory another user can search (0710, group nobody's) but only its owner can write."""
    path = Path(tempfile.mkdtemp(prefix="nt-grp-", dir="/tmp"))
    try:
        if IS_ROOT:
            os.chown(path, -1, other_user()[1])
        os.chmod(path, 0o710)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def raw_request(
    address: str, method: str, path: str, body: object = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], object]:
    """One request with exactly the headers given (no token added): status, headers, JSON body."""
    addr = parse_address(address)
    assert addr.host is not None and addr.port is not None
    conn = http.client.HTTPConnection(addr.host, addr.port, timeout=10)
    try:
        payload = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=payload, headers={"Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        raw = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(raw) if raw else None
    finally:
        conn.close()


# A client run as another user: a root-started interpreter that drops to uid/gid nobody once every
# module it needs is loaded (the interpreter itself may live where nobody cannot read), then sends
# the requests over the socket. "$PID" stands for its own PID. Prints [[status, body], ...].
AS_OTHER_USER = r"""
import http.client, json, os, socket, sys
path, uid, gid, plan = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
os.setgroups([])
os.setgid(gid)
os.setuid(uid)
me = str(os.getpid())

class Conn(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(path)

out = []
for method, url, body in plan:
    payload = None if body is None else json.dumps(body).replace('"$PID"', me).encode()
    conn = Conn("localhost", timeout=10)
    try:
        conn.request(method, url.replace("$PID", me), body=payload, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        raw = response.read()
        out.append([response.status, json.loads(raw) if raw else None])
    except PermissionError:
        out.append([None, "EACCES"])
    finally:
        conn.close()
print(json.dumps(out))
"""


def as_other_user(socket_path: str, plan: list[tuple[str, str, object]]) -> list[list[object]]:
    uid, gid = other_user()
    out = subprocess.run(
        [sys.executable, "-c", AS_OTHER_USER, socket_path, str(uid), str(gid), json.dumps(plan)],
        capture_output=True,
        text=True,
        timeout=30,
        env=tool_env(None),
        cwd="/",
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


# -- the Unix socket ------------------------------------------------------------------------------


def test_socket_is_0600_in_a_directory_only_its_owner_can_write(daemon: Daemon) -> None:
    st = os.stat(daemon.address)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == os.geteuid()
    parent = os.stat(os.path.dirname(daemon.address))
    assert parent.st_uid == os.geteuid() and stat.S_IMODE(parent.st_mode) & 0o022 == 0
    assert mode(daemon.address + ".lock") == 0o600


def test_default_socket_without_xdg_is_in_a_private_per_user_directory(
    monkeypatch: pytest.MonkeyPatch, short_tmp: Path
) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("NEURON_EMULATOR_ADDR", raising=False)
    monkeypatch.delenv("TMPDIR", raising=False)
    assert resolve_address().socket_path == f"/tmp/neuron-emulator-{os.getuid()}/daemon.sock"
    monkeypatch.setenv("TMPDIR", str(short_tmp))  # the same directory, but the test's own (not /tmp)
    path = f"{short_tmp}/neuron-emulator-{os.getuid()}/daemon.sock"
    assert resolve_address().socket_path == path
    before = run_tool(["neuron-emulator", "status"], None)
    assert before.returncode == 1, f"a daemon already runs at the default address {path}: stop it first"
    up = run_tool(["neuron-emulator", "up", "--detach"], None)
    assert up.returncode == 0, up.stderr
    try:
        assert f"up at {path}" in up.stdout
        directory = os.lstat(os.path.dirname(path))
        assert stat.S_ISDIR(directory.st_mode) and directory.st_uid == os.geteuid()
        assert stat.S_IMODE(directory.st_mode) & 0o027 == 0  # 0700 (0710 after a --socket-group run)
        assert mode(path) == 0o600 and mode(path + ".log") == 0o600
        ls = run_tool(["neuron-ls", "-j"], None)  # every tool resolves the same default
        assert ls.returncode == 0, ls.stderr
    finally:
        assert run_tool(["neuron-emulator", "down"], None).returncode == 0
    assert not os.path.exists(path)
    os.unlink(path + ".log")


def test_the_per_user_directory_is_created_0700_and_an_unsafe_one_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    private = tmp_path / "neuron-emulator-test"
    monkeypatch.setattr(security, "private_runtime_dir", lambda: str(private))
    old = os.umask(0)  # even a permissive umask gives 0700
    try:
        ensure_runtime_dir(str(private))
    finally:
        os.umask(old)
    assert private.is_dir() and mode(private) == 0o700
    ensure_runtime_dir(str(private))  # an existing safe one is used as it is
    private.chmod(0o770)
    with pytest.raises(SecurityError, match=r"writable by other users \(mode 0770\)"):
        ensure_runtime_dir(str(private))
    private.rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    private.symlink_to(elsewhere)  # e.g. planted by another user in /tmp
    with pytest.raises(SecurityError, match="a symbolic link"):
        ensure_runtime_dir(str(private))
    if IS_ROOT:
        private.unlink()
        private.mkdir(mode=0o700)
        os.chown(private, other_user()[0], -1)
        with pytest.raises(SecurityError, match=f"owned by uid {other_user()[0]}, not by you"):
            ensure_runtime_dir(str(private))


@pytest.mark.parametrize("dir_mode", [0o777, 0o1777, 0o720])
def test_a_socket_directory_others_can_write_is_refused(dir_mode: int, short_tmp: Path) -> None:
    unsafe = short_tmp / "open-to-all"
    unsafe.mkdir()
    unsafe.chmod(dir_mode)
    up = run_tool(["neuron-emulator", "up"], str(unsafe / "d.sock"))
    assert up.returncode == 1 and one_clear_line(up.stderr), up.stderr
    assert f"refusing to use {unsafe}: writable by other users (mode {dir_mode:04o})" in up.stderr
    assert list(unsafe.iterdir()) == []  # no socket, lock or log left


@needs_root
def test_a_socket_directory_owned_by_another_user_is_refused(short_tmp: Path) -> None:
    theirs = short_tmp / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, other_user()[0], -1)
    up = run_tool(["neuron-emulator", "up", "--detach"], str(theirs / "d.sock"))
    assert up.returncode == 1 and one_clear_line(up.stderr), up.stderr
    assert f"owned by uid {other_user()[0]}, not by you" in up.stderr
    assert list(theirs.iterdir()) == []


def test_socket_group_gives_0660_to_that_group(group_dir: Path) -> None:
    group = grp.getgrgid(other_user()[1] if IS_ROOT else os.getegid()).gr_name
    daemon = start_daemon(group_dir, extra=["--socket-group", group])
    try:
        st = os.stat(daemon.address)
        assert stat.S_IMODE(st.st_mode) == 0o660 and st.st_gid == grp.getgrnam(group).gr_gid
        assert daemon.client.get("/status")["daemon_pid"] == daemon.proc.pid
    finally:
        assert daemon.stop() == 0
    assert not os.path.exists(daemon.address)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--socket-group", "no-such-group-xyz"], "--socket-group no-such-group-xyz: no such group"),
        (["--socket-group", "root", "--port", "7061"], "--socket-group applies to a Unix socket"),
        (["--bind", "0.0.0.0"], "--bind needs --port"),
        (["--port", "7061", "--bind", "my-host"], "--bind my-host: expected an IP address"),
    ],
)
def test_bad_access_flags_are_one_line_exit_2(argv: list[str], message: str, short_tmp: Path) -> None:
    for detach in ([], ["--detach"]):
        up = run_tool(["neuron-emulator", "up", *detach, *argv], str(short_tmp / "x.sock"))
        assert up.returncode == 2 and one_clear_line(up.stderr), up.stderr
        assert message in up.stderr
    assert list(short_tmp.iterdir()) == []


def test_socket_group_that_cannot_reach_the_directory_is_refused(short_tmp: Path) -> None:
    group = grp.getgrgid(os.getegid()).gr_name
    short_tmp.chmod(0o700)
    up = run_tool(["neuron-emulator", "up", "--socket-group", group], str(short_tmp / "d.sock"))
    assert up.returncode == 1 and one_clear_line(up.stderr), up.stderr
    assert "cannot reach" in up.stderr and "use --socket in a directory they can search" in up.stderr


# -- who may change what on the socket -------------------------------------------------------------


def test_a_process_may_attach_and_report_only_for_itself(daemon: Daemon, short_tmp: Path, holders) -> None:
    holder = start_holder(daemon.address, short_tmp)  # a real training process attaches itself
    holders.append(holder)
    assert holder.attached, holder.stderr
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        for path, body in [
            ("/processes", {"pid": sleeper.pid, "command": "sleep 30"}),
            ("/processes", {"pid": holder.pid, "command": "impostor", "kind": "tool"}),
            (f"/processes/{holder.pid}/executions", execution_report()),
            (f"/processes/{holder.pid}/executions/batch", {"executions": [execution_report()]}),
        ]:
            with pytest.raises(DaemonError) as err:
                daemon.client.post(path, body)
            assert err.value.status == 403, (path, err.value.body)
            assert set(err.value.body) == {"error"} and f"process {os.getpid()} may not" in err.value.body["error"]
        assert [p["pid"] for p in daemon.processes()] == [holder.pid]  # nothing changed
    finally:
        sleeper.kill()
        sleeper.wait()
    # the daemon's owner may release any process (an operator cleaning up)
    assert daemon.client.delete(f"/processes/{holder.pid}")["pid"] == holder.pid
    assert daemon.processes() == []
    assert holder.release() == 0  # its own release at exit finds nothing to free, quietly


@needs_root
def test_another_user_in_the_socket_group_may_change_only_itself(group_dir: Path, holders) -> None:
    daemon = start_daemon(group_dir, extra=["--socket-group", grp.getgrgid(other_user()[1]).gr_name])
    try:
        holder = start_holder(daemon.address, group_dir)
        holders.append(holder)
        assert holder.attached, holder.stderr
        ecc = {"neuron_device": 0, "event_type": "mem_ecc_corrected"}
        answers = as_other_user(
            daemon.address,
            [
                ("GET", "/v1/status", None),
                ("POST", "/v1/processes", {"pid": holder.pid, "command": "impostor", "kind": "tool"}),
                ("DELETE", f"/v1/processes/{holder.pid}", None),
                ("POST", f"/v1/processes/{holder.pid}/executions", execution_report()),
                ("POST", "/v1/faults/ecc", ecc),
                ("POST", "/v1/processes", {"pid": "$PID", "command": "neuron-ls", "kind": "tool"}),
                ("DELETE", "/v1/processes/$PID", None),
            ],
        )
        codes = [status for status, _ in answers]
        assert codes == [200, 403, 403, 403, 403, 201, 200], answers
        uid = other_user()[0]
        assert "only itself may" in answers[1][1]["error"]
        assert "only itself, the daemon's owner or root may" in answers[2][1]["error"]
        assert answers[4][1] == {"error": f"uid {uid} may not inject faults: only the daemon's owner or root may"}
        assert [p["pid"] for p in daemon.processes()] == [holder.pid]
        assert daemon.client.get("/snapshot")["hardware_counters"][0]["mem_ecc_corrected"] == 0
        assert holder.release() == 0
    finally:
        assert daemon.stop() == 0


@needs_root
def test_another_user_cannot_connect_to_a_0600_socket(group_dir: Path) -> None:
    daemon = start_daemon(group_dir)  # the directory lets nobody search it; the socket does not
    try:
        assert as_other_user(daemon.address, [("GET", "/v1/status", None)]) == [[None, "EACCES"]]
    finally:
        assert daemon.stop() == 0


# -- TCP: bearer token for changes, open reads -----------------------------------------------------


def test_tcp_binds_loopback_and_changes_need_the_token(tcp_env: Path, holders) -> None:
    daemon, port = tcp_daemon(tcp_env)
    address = daemon.address
    token_file = Path(token_path(port))
    try:
        assert token_file.parent == tcp_env
        listening = [c.laddr for c in psutil.Process(daemon.proc.pid).net_connections("tcp") if c.status == "LISTEN"]
        assert [(a.ip, a.port) for a in listening] == [("127.0.0.1", port)]
        assert mode(token_file) == 0o600 and token_file.stat().st_uid == os.geteuid()
        token = token_file.read_text().strip()
        assert len(token) >= 40
        assert f"bearer token in {token_file}" in daemon.log_text() and token not in daemon.log_text()

        # reads are open
        status, _, body = raw_request(address, "GET", "/v1/status")
        assert status == 200 and body["address"] == address
        # every route that changes something wants the token: missing or wrong -> 401 JSON
        schema = DaemonClient(parse_address(address)).request("GET", "/openapi.json", versioned=False)
        mutating = [(m.upper(), p) for p, ops in schema["paths"].items() for m in ops if m in ("post", "put", "delete")]
        assert {("POST", "/v1/processes"), ("DELETE", "/v1/processes/{pid}"), ("POST", "/v1/faults/ecc")} <= set(
            mutating
        )
        assert ("POST", "/v1/processes/{pid}/executions/batch") in mutating
        for method, path in mutating:
            url = path.replace("{pid}", str(os.getpid()))
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token}):
                status, got, body = raw_request(address, method, url, {}, headers)
                assert status == 401, (method, path, headers, status, body)
                assert set(body) == {"error"} and "bearer token" in body["error"]
                assert str(token_file) in body["error"] and token not in body["error"]
                assert got["www-authenticate"].startswith("Bearer")
        ecc = {"neuron_device": 0, "event_type": "mem_ecc_corrected", "count": 3}
        status, _, body = raw_request(address, "POST", "/v1/faults/ecc", ecc, {"Authorization": f"Bearer {token}"})
        assert status == 200 and body["mem_ecc_corrected"] == 3
        # the client sends the token by itself: the tools and the runtime keep working unchanged
        assert daemon.client.post("/faults/ecc", ecc)["mem_ecc_corrected"] == 6
        fault = run_tool(["neuron-emulator", "fault", "ecc", "--device", "0"], address)
        assert fault.returncode == 0, fault.stderr
        with pytest.raises(DaemonError) as err:  # a token holder has the owner's authority, the host's rules stay
            daemon.client.post("/processes", {"pid": 4194304, "command": "ghost"})
        assert err.value.status == 400 and "not running on this host" in err.value.body["error"]
        # NEURON_EMULATOR_TOKEN wins over the file
        wrong = run_tool(["neuron-emulator", "fault", "ecc", "--device", "0"], address, NEURON_EMULATOR_TOKEN="nope")
        assert wrong.returncode == 1 and one_clear_line(wrong.stderr) and "invalid bearer token" in wrong.stderr
        right = run_tool(["neuron-emulator", "fault", "ecc", "--device", "0"], address, NEURON_EMULATOR_TOKEN=token)
        assert right.returncode == 0, right.stderr
        bad = run_tool(["neuron-emulator", "fault", "ecc", "--device", "0"], address, NEURON_EMULATOR_TOKEN="a b")
        assert bad.returncode == 1 and one_clear_line(bad.stderr) and TOKEN_ENV_VAR in bad.stderr

        # a real training process attaches over TCP
        holder = start_holder(address, tcp_env)
        holders.append(holder)
        assert holder.attached, holder.stderr
        assert [p["pid"] for p in daemon.processes()] == [holder.pid]
        assert holder.release() == 0
        assert wait_until(lambda: daemon.processes() == [], timeout=5)
    finally:
        assert daemon.stop() == 0
    assert not token_file.exists()  # removed at shutdown
    assert "Traceback" not in daemon.log_text()


def test_a_token_left_by_a_killed_daemon_is_replaced(tcp_env: Path) -> None:
    port = free_port()
    crashed = start_daemon(tcp_env, address=f"http://127.0.0.1:{port}")
    old = Path(token_path(port)).read_text()
    crashed.stop(signal.SIGKILL)
    assert Path(token_path(port)).read_text() == old  # left behind
    fresh = start_daemon(tcp_env, address=f"http://127.0.0.1:{port}")
    try:
        assert Path(token_path(port)).read_text() != old and mode(token_path(port)) == 0o600
        assert fresh.client.post("/faults/ecc", {"neuron_device": 0, "event_type": "mem_ecc_corrected"})
    finally:
        assert fresh.stop() == 0
    assert not os.path.exists(token_path(port))


def test_bind_all_interfaces_serves_local_clients_over_loopback(tcp_env: Path) -> None:
    port = free_port()
    up = run_tool(["neuron-emulator", "up", "--detach", "--port", str(port), "--bind", "0.0.0.0"], None)
    assert up.returncode == 0, up.stderr
    address = f"http://127.0.0.1:{port}"
    try:
        assert f"up at {address}" in up.stdout
        status = DaemonClient(parse_address(address)).get("/status")
        listening = [
            c.laddr for c in psutil.Process(status["daemon_pid"]).net_connections("tcp") if c.status == "LISTEN"
        ]
        assert [(a.ip, a.port) for a in listening] == [("0.0.0.0", port)]
        assert status["address"] == address
        log = (tcp_env / f"neuron-emulator-{port}.log").read_text()
        assert "listening on 0.0.0.0" in log and "reads are open to every host" in log
        assert mode(tcp_env / f"neuron-emulator-{port}.log") == 0o600
        ls = run_tool(["neuron-ls", "-a", "-j"], address)
        assert ls.returncode == 0, ls.stderr
        assert json.loads(ls.stdout)[0]["neuron_processes"][0]["command"] == "neuron-ls -a -j"  # registered itself
    finally:
        assert run_tool(["neuron-emulator", "down"], address).returncode == 0
    assert not os.path.exists(token_path(port))


def test_training_and_tools_work_over_tcp(tcp_env: Path, holders) -> None:
    daemon, _ = tcp_daemon(tcp_env)
    address = daemon.address
    try:
        run = subprocess.run(
            [str(BIN / "neuron-emulator"), "run", "gpt-tiny", "--steps", "2"],
            env=tool_env(address, {"NEURON_COMPILE_CACHE_URL": str(tcp_env / "compile-cache")}),
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
        assert run.returncode == 0, run.stderr
        assert "gpt-tiny: 2 steps" in run.stdout
        assert daemon.processes() == []  # released at exit

        # a training loop's execution reports reach the daemon over TCP (the client sends the token)
        loop = train(address, tcp_env, "--steps", "3", "--hold")
        holders.append(Holder(loop, True))
        assert len(read_until_done(loop)) == 4
        (mine,) = [p for p in daemon.client.get("/snapshot")["processes"] if p["pid"] == loop.pid]
        assert mine["executions"]["completed"] == 3
        assert loop.communicate(timeout=30)[0] == "" and loop.returncode == 0

        holder = start_holder(address, tcp_env)
        holders.append(holder)
        assert holder.attached, holder.stderr
        ls = run_tool(["neuron-ls", "-j"], address)
        assert ls.returncode == 0, ls.stderr
        assert json.loads(ls.stdout)[0]["neuron_processes"][0]["pid"] == holder.pid
        monitor = subprocess.Popen(
            [str(BIN / "neuron-monitor")], env=tool_env(address), stdout=subprocess.PIPE, text=True
        )
        try:
            assert monitor.stdout is not None
            first = monitor.stdout.readline()
            assert wait_until(lambda: any(p["kind"] == "tool" for p in daemon.processes()), timeout=5)
        finally:
            monitor.terminate()
            monitor.wait(timeout=10)
        report = json.loads(first)
        assert report["instance_info"]["instance_type"] == "trn1.2xlarge"
        assert [r["pid"] for r in report["neuron_runtime_data"]] == [holder.pid]
        assert monitor.returncode == 0
        assert holder.release() == 0
    finally:
        assert daemon.stop() == 0


# -- neuron-exporter is read-only -----------------------------------------------------------------


def test_exporter_answers_405_to_every_change(tcp_env: Path, exporters) -> None:
    daemon, _ = tcp_daemon(tcp_env)
    address = daemon.address
    try:
        exporter = start_exporter(address)
        exporters.append(exporter)
        spec = json.loads(exporter.get("/openapi.json")[1])
        routes = set(spec["paths"])
        assert {"/metrics", "/healthz", "/readyz", "/api/v1/processes", "/api/v1/history"} <= routes
        for path, ops in spec["paths"].items():
            assert set(ops) == {"get"}, (path, ops)  # no route that changes anything
            for method in ("POST", "PUT", "DELETE", "PATCH"):
                status, _, body = raw_request(exporter.url, method, path, {})
                assert status == 405, (method, path, status)
                assert set(body) == {"error"}, body
        # it registered itself with the daemon as a tool, over TCP with the token
        assert wait_until(lambda: [p["kind"] for p in daemon.processes()] == ["tool"], timeout=10)
        assert exporter.stop() == 0
    finally:
        assert daemon.stop() == 0
