"""Profiling a running process through the daemon (docs/profiling.md §Profiling a running
process): the request's states, the answer that hands it out once, the process's report, and the
refusals — on an in-process daemon app."""

from __future__ import annotations

from typing import Any

from emulator.daemon.profiles import KEEP_FINISHED, ProfileRequests
from tests.fuzz_support import AUTH, SEEDED_TOOL, AsgiClient, daemon_app, execution_body, seed_daemon

PID = 1  # a seeded runtime process (tests/fuzz_support.py)


def _client() -> AsgiClient:
    client = AsgiClient(daemon_app(), AUTH)
    seed_daemon(client)
    return client


def _report(client: AsgiClient, pid: int = PID, batch: bool = False) -> dict[str, Any]:
    now = client.get("/v1/snapshot").json()["monotonic"]
    body = execution_body(0 if pid == PID else 8, now - 0.5)
    if batch:
        reply = client.post(f"/v1/processes/{pid}/executions/batch", {"executions": [body]})
    else:
        reply = client.post(f"/v1/processes/{pid}/executions", body)
    assert reply.status == 200, reply.body
    return reply.json()


def _error(reply: Any, status: int) -> str:
    assert reply.status == status, (reply.status, reply.body[:300])
    return reply.json()["error"]


def test_request_is_handed_out_once_then_reported_done() -> None:
    client = _client()
    assert "no profile" in _error(client.get(f"/v1/processes/{PID}/profile"), 404)
    assert "profile" not in _report(client)  # no request: the answer is the faults alone
    asked = client.post(f"/v1/processes/{PID}/profile", {"steps": 3, "output_dir": "/tmp/prof"})
    assert asked.status == 202
    state = asked.json()
    assert {k: state[k] for k in ("pid", "state", "steps", "output_dir")} == {
        "pid": PID,
        "state": "pending",
        "steps": 3,
        "output_dir": "/tmp/prof",
    }
    request_id = state["id"]
    # another process's answers do not carry it
    assert "profile" not in _report(client, pid=2)
    answer = _report(client, batch=True)
    assert answer["profile"] == {"id": request_id, "steps": 3, "output_dir": "/tmp/prof"}
    assert "faults" in answer
    assert "profile" not in _report(client)  # once
    assert client.get(f"/v1/processes/{PID}/profile").json()["state"] == "capturing"
    # one at a time per process
    again = client.post(f"/v1/processes/{PID}/profile", {"steps": 1, "output_dir": "/tmp/other"})
    assert "already has a profile request capturing" in _error(again, 409)
    # a report for another request is refused; the right one finishes it
    assert _error(client.post(f"/v1/processes/{PID}/profile/done", {"id": request_id + 7, "dirs": []}), 404)
    dirs = ["/tmp/prof/i-0_pid_1"]
    done = client.post(f"/v1/processes/{PID}/profile/done", {"id": request_id, "dirs": dirs, "error": None})
    assert done.status == 200 and done.json()["state"] == "done"
    state = client.get(f"/v1/processes/{PID}/profile").json()
    assert state["state"] == "done" and state["dirs"] == dirs and "error" not in state
    assert "is done, not capturing" in _error(client.post(f"/v1/processes/{PID}/profile/done", {"id": request_id}), 409)
    # a new request may follow a finished one
    assert client.post(f"/v1/processes/{PID}/profile", {"steps": 1, "output_dir": "/tmp/p2"}).status == 202


def test_failed_report_and_detach_fail_the_request() -> None:
    client = _client()
    first = client.post(f"/v1/processes/{PID}/profile", {"steps": 2, "output_dir": "/tmp/a"}).json()
    _report(client)
    failed = client.post(f"/v1/processes/{PID}/profile/done", {"id": first["id"], "error": "disk full"})
    assert failed.json()["state"] == "failed" and failed.json()["error"] == "disk full"
    # pending, then the process detaches: failed, with the reason
    client.post(f"/v1/processes/{PID}/profile", {"steps": 2, "output_dir": "/tmp/a"})
    assert client.request("DELETE", f"/v1/processes/{PID}").status == 200
    state = client.get(f"/v1/processes/{PID}/profile").json()
    assert state["state"] == "failed" and state["error"] == "the process detached while the request was pending"
    # not attached any more: a new request is a 404
    assert "not an attached runtime process" in _error(
        client.post(f"/v1/processes/{PID}/profile", {"steps": 1, "output_dir": "/tmp/a"}), 404
    )


def test_bad_requests_are_json_errors() -> None:
    client = _client()
    path = f"/v1/processes/{PID}/profile"
    for body in (
        {"steps": 0, "output_dir": "/tmp/a"},
        {"steps": 10_001, "output_dir": "/tmp/a"},
        {"steps": 1, "output_dir": "relative/dir"},
        {"steps": 1, "output_dir": ""},
        {"steps": 1},
        {"steps": "many", "output_dir": "/tmp/a"},
        {"steps": 1, "output_dir": "/tmp/a", "extra": 1},
        [],
    ):
        reply = client.post(path, body)
        assert reply.status in (400, 422), (body, reply.status)
        assert isinstance(reply.json()["error"], str)
    assert _error(client.request("POST", path, b"{not json"), 422)
    # a tool is not a runtime process; an unknown PID is not attached
    for pid in (SEEDED_TOOL, 60):
        reply = client.post(f"/v1/processes/{pid}/profile", {"steps": 1, "output_dir": "/tmp/a"})
        assert "not an attached runtime process" in _error(reply, 404)
    assert _error(client.post(f"/v1/processes/{PID}/profile/done", {"id": 0}), 422)
    assert _error(client.post(f"/v1/processes/{PID}/profile/done", {"id": 1, "dirs": "x"}), 422)


def test_process_exit_fails_an_open_request_and_old_requests_are_forgotten() -> None:
    requests = ProfileRequests()
    req = requests.request(5, 1, "/tmp/x")
    assert requests.hand_out(5) == {"id": req.id, "steps": 1, "output_dir": "/tmp/x"}
    requests.gone(5, "the process exited")
    gone = requests.get(5)
    assert gone is not None and gone.state == "failed"
    assert gone.error == "the process exited while the request was capturing"
    requests.gone(5, "again")  # a finished request stays as it is
    assert requests.get(5) == gone
    for pid in range(100, 100 + KEEP_FINISHED + 10):
        requests.request(pid, 1, "/tmp/x")
        requests.gone(pid, "the process exited")
    assert requests.get(5) is None and requests.get(100 + KEEP_FINISHED + 9) is not None
