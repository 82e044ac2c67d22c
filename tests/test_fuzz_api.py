"""The daemon's and neuron-exporter's HTTP APIs under generated requests (schemathesis, in-process),
and the size limits on request bodies and targets of both (docs/fuzzing.md).

A 4xx is a fine answer to a fuzzed request; a 5xx, an answer that is not JSON ``{"error": ...}``,
a request that does not finish within its timeout, or a daemon left in a state its clients cannot
read is a failure. Each test starts from a fresh in-process app and registry.
"""

from __future__ import annotations

import contextlib
import json
import socket
from pathlib import Path

from neurontools.http_limits import MAX_BODY_BYTES, MAX_TARGET_BYTES, REPLAY_BATCH_BYTES
from tests.fuzz_support import (
    AUTH,
    SEEDED,
    AsgiClient,
    FuzzStats,
    daemon_app,
    daemon_problems,
    dumps,
    execution_body,
    exporter_app,
    fuzz_daemon_api,
    fuzz_daemon_requests,
    fuzz_exporter_api,
    fuzz_exporter_requests,
    seed_daemon,
    served_on_unix_socket,
)
from tests.support import run_tool, start_daemon

# generated requests per operation and data mode (positive, negative); together the two API tests
# send more than 1,000 requests (each prints its counts with -s)
DAEMON_EXAMPLES = 45
DAEMON_BATCH_EXAMPLES = 12  # a batch is a list of executions: slow to generate
EXPORTER_EXAMPLES = 175


def test_daemon_api_under_schemathesis_no_5xx_and_consistent_after(short_tmp: Path) -> None:
    stats = FuzzStats()
    app = fuzz_daemon_api(stats, examples=DAEMON_EXAMPLES, heavy_examples=DAEMON_BATCH_EXAMPLES)
    print(stats.summary())
    assert not stats.failures, "\n".join(stats.failures[:10])
    assert stats.total >= 650
    assert len(stats.counts) >= 11  # every operation of the schema was exercised
    assert daemon_problems(app) == []
    with served_on_unix_socket(app, str(short_tmp / "fuzzed.sock")) as path:
        ls = run_tool(["neuron-ls", "-j", "-a"], path)
    assert ls.returncode == 0, ls.stderr
    devices = json.loads(ls.stdout)
    assert len(devices) == 16 and "Traceback" not in ls.stderr


def test_exporter_api_under_schemathesis_no_5xx() -> None:
    stats = FuzzStats()
    app, collector = fuzz_exporter_api(stats, examples=EXPORTER_EXAMPLES)
    print(stats.summary())
    assert not stats.failures, "\n".join(stats.failures[:10])
    assert stats.total >= 350
    assert len(stats.counts) >= 10  # every operation of the schema
    client = AsgiClient(app)
    assert client.get("/readyz").status == 200
    assert collector.state.ready and "neuroncore_utilization_ratio" in client.get("/metrics").body.decode()


def test_daemon_survives_hostile_bodies_and_queries_with_its_snapshot_intact() -> None:
    """NaN and Infinity literals, numbers past any counter, negative and wrong-typed values, lone
    surrogates, broken JSON: refused with a 4xx, and the snapshot every tool reads stays valid."""
    stats = FuzzStats()
    app = fuzz_daemon_requests(stats, 300)
    print(stats.summary())
    assert not stats.failures, "\n".join(stats.failures[:10])
    assert daemon_problems(app) == []


def test_exporter_answers_odd_queries_and_paths_with_json_errors() -> None:
    stats = FuzzStats()
    fuzz_exporter_requests(stats, 200)
    print(stats.summary())
    assert not stats.failures, "\n".join(stats.failures[:10])


def test_what_longer_fuzz_runs_found_stays_fixed() -> None:
    """Cases scripts/fuzz.py found (positive data by the schema): each a 4xx now, not a 500."""
    app = daemon_app()
    client = AsgiClient(app, AUTH)
    seed_daemon(client)
    now = client.get("/v1/snapshot").json()["monotonic"]
    for compile_cache in ({}, {"hits": 0}, {"misses": 1}):  # both counters are required
        body = {**execution_body(0, now - 1.0), "compile_cache": compile_cache}
        assert "compile_cache" in _error_of(client.post("/v1/processes/1/executions", body), 422)
        batch = {"executions": [body]}
        assert _error_of(client.post("/v1/processes/1/executions/batch", batch), 422)
    for name, value in (("flops", 10**400), ("device_seconds", float("inf")), ("start", float("nan"))):
        body = {**execution_body(0, now - 1.0), name: value}
        assert name in _error_of(client.request("POST", "/v1/processes/1/executions", dumps(body)), 422)
    assert daemon_problems(app) == []


# -- limits --------------------------------------------------------------------------------------------


def _error_of(reply, status: int) -> str:  # type: ignore[no-untyped-def]
    assert reply.status == status, (reply.status, reply.body[:300])
    body = reply.json()
    assert isinstance(body, dict) and isinstance(body["error"], str)
    return body["error"]


def test_daemon_refuses_bodies_and_targets_over_the_limits_with_json() -> None:
    app = daemon_app()
    client = AsgiClient(app, AUTH)
    seed_daemon(client)
    pid = next(iter(SEEDED))
    batch_path = f"/v1/processes/{pid}/executions/batch"
    oversized = b'{"executions": [' + b" " * MAX_BODY_BYTES + b"]}"
    assert "larger than 1048576 bytes" in _error_of(client.request("POST", batch_path, oversized), 413)
    # the same body without a length, in chunks: refused once the limit is passed
    pieces = [oversized[i : i + 65536] for i in range(0, len(oversized), 65536)]
    assert "larger than" in _error_of(client.request("POST", batch_path, chunks=pieces), 413)
    lying = client.request("POST", batch_path, b"{}", headers={"content-length": "12x"})
    assert "Content-Length" in _error_of(lying, 400)
    huge = client.request("POST", batch_path, b"{}", headers={"content-length": "9" * 40})
    assert _error_of(huge, 413)
    long_query = "/v1/snapshot?latencies_since=" + "1" * MAX_TARGET_BYTES
    assert "longer than 8192 bytes" in _error_of(client.get(long_query), 414)
    assert _error_of(client.get("/v1/processes/" + "9" * MAX_TARGET_BYTES), 414)
    # a batch just under the limit is legitimate and counted whole
    now = client.get("/v1/snapshot").json()["monotonic"]
    executions, size = [], 0
    while True:
        body = execution_body(0, now - 1.0)
        size += len(json.dumps(body)) + 2
        if size > MAX_BODY_BYTES - 100:
            break
        executions.append(body)
    payload = json.dumps({"executions": executions}).encode()
    assert MAX_BODY_BYTES - 2000 < len(payload) <= MAX_BODY_BYTES
    before = _completed(client, pid)
    assert client.request("POST", batch_path, payload).status == 200
    assert _completed(client, pid) == before + len(executions)
    assert daemon_problems(app) == []


def _completed(client: AsgiClient, pid: int) -> int:
    snap = client.get("/v1/snapshot").json()
    return next(p["executions"]["completed"] for p in snap["processes"] if p["pid"] == pid)


def test_exporter_refuses_bodies_and_targets_over_the_limits_with_json() -> None:
    daemon = daemon_app()
    seed_daemon(AsgiClient(daemon, AUTH))
    app, _ = exporter_app(daemon)
    client = AsgiClient(app)
    assert client.get("/api/v1/history?metric=utilization").status == 200
    assert "longer than" in _error_of(client.get("/api/v1/history?metric=" + "x" * MAX_TARGET_BYTES), 414)
    assert _error_of(client.request("GET", "/metrics", b"x" * (MAX_BODY_BYTES + 1)), 413)
    assert _error_of(client.request("GET", "/healthz", chunks=[b"x" * 600_000, b"y" * 600_000]), 413)


def _raw_exchange(path: str, request: bytes) -> bytes:
    """Send ``request`` on the daemon's Unix socket; the whole answer (the server closes)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(path)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # refused before the body was read
            sock.sendall(request)
        answer = b""
        with contextlib.suppress(ConnectionResetError):  # the server closed while we were still sending
            while chunk := sock.recv(65536):
                answer += chunk
                if b"\r\n\r\n" in answer and _complete(answer):
                    break
        return answer


def _complete(answer: bytes) -> bool:
    head, _, body = answer.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False


def test_real_daemon_answers_oversized_requests_with_json_and_keeps_serving(short_tmp: Path) -> None:
    daemon = start_daemon(short_tmp, "trn1.2xlarge")
    try:
        body = b"x" * (MAX_BODY_BYTES + 10)
        head = (
            b"POST /v1/processes/1/executions/batch HTTP/1.1\r\nHost: localhost\r\n"
            b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
        )
        answer = _raw_exchange(daemon.address, head + body)
        status_line, _, rest = answer.partition(b"\r\n")
        assert b" 413 " in status_line
        assert "larger than" in json.loads(rest.partition(b"\r\n\r\n")[2])["error"]
        long_target = b"GET /v1/snapshot?latencies_since=" + b"1" * 9000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n"
        answer = _raw_exchange(daemon.address, long_target)
        assert b" 414 " in answer.partition(b"\r\n")[0] and b'"error"' in answer
        # a target far too long: 414 from the limits, or a plain 400 from the HTTP parser when it
        # arrives in pieces past what that takes (16 KiB of request line and headers)
        for size in (20_000, 400_000):
            answer = _raw_exchange(daemon.address, b"GET /" + b"a" * size + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            status_line = answer.partition(b"\r\n")[0]  # empty: reset before the answer could be read
            assert status_line == b"" or b" 414 " in status_line or b" 400 " in status_line, status_line
        assert daemon.answers() and daemon.client.get("/snapshot")["processes"] == []
    finally:
        assert daemon.stop() == 0
    assert "Traceback" not in daemon.log_text()


def test_a_replayed_step_is_posted_in_batches_under_the_body_limit() -> None:
    from emulator.parallel.replay import batches

    now = 100.0
    bodies = [execution_body(0, now + i) for i in range(3000)]  # a long pipeline step: ~2 MB in all
    posts = list(batches(bodies))
    assert len(posts) > 1 and [b for post in posts for b in post] == bodies
    assert all(len(json.dumps({"executions": post})) <= REPLAY_BATCH_BYTES for post in posts)
    assert list(batches([])) == []
