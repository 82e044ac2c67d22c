"""Fuzzing machinery shared by tests/test_fuzz_*.py (bounded example counts, run in CI) and
scripts/fuzz.py (the same fuzzers for minutes). See docs/fuzzing.md.

Everything runs in-process: the daemon's FastAPI app over a fresh registry whose process table is
a fixed set of "live" PIDs (so attaching works without real processes), neuron-exporter's app
collecting from that daemon app, and the parsing functions of the tools. A failure is recorded
(not raised) so one run reports every problem with the request or input that caused it; the
callers assert there were none.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import math
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as fixed_seed
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

from emulator.daemon.app import DaemonInfo, create_app
from emulator.daemon.registry import Registry
from emulator.daemon.security import Access
from emulator.hardware import build_inventory, make_identity
from neurontools.contract.inventory import RUNTIME, inventory_from_dict
from neurontools.contract.schema import CORE_MEMORY_KEYS
from neurontools.sources.daemon_client import DaemonError

TOKEN = "fuzz-token"  # the in-process daemon runs with a bearer token: the fuzzer holds it
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LIVE_PIDS = frozenset(range(1, 65))  # the fake process table: these PIDs are "running"
SEEDED = {1: 8, 2: 8}  # runtime processes attached before each operation is fuzzed: pid -> cores
SEEDED_TOOL = 3
REQUEST_TIMEOUT_S = 10.0  # a request taking longer is a hang


def hypothesis_settings(examples: int, *, seed: int | None = None) -> settings:
    """Deterministic in CI (derandomized, no example database); ``seed`` for longer runs that
    should explore further than the derandomized sequence."""
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=seed is None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],
        print_blob=False,
    )


@dataclass
class FuzzStats:
    """Requests or inputs tried, per target, and the failures with what caused them."""

    counts: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    def count(self, target: str, n: int = 1) -> None:
        self.counts[target] += n

    def fail(self, target: str, message: str) -> None:
        self.failures.append(f"{target}: {message}"[:3000])

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        lines = [f"{name}: {n}" for name, n in sorted(self.counts.items())]
        lines.append(f"total: {self.total}, failures: {len(self.failures)}")
        return "\n".join(lines)


def run_given(
    strategy: st.SearchStrategy[Any], examples: int, body: Callable[[Any], None], *, seed: int | None
) -> None:
    """Run ``body`` on ``examples`` values of ``strategy`` (fewer when the strategy has fewer)."""

    @given(strategy)
    @hypothesis_settings(examples, seed=seed)
    def run(value: Any) -> None:
        body(value)

    if seed is not None:
        run = fixed_seed(seed)(run)
    with contextlib.suppress(Unsatisfiable):  # e.g. negative data for an operation without inputs
        run()


# -- JSON values and mutations ----------------------------------------------------------------------

EXTREME_NUMBERS: tuple[Any, ...] = (
    0,
    -1,
    1,
    2**31,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64,
    10**30,
    10**400,
    -(10**400),
    1e308,
    -1e308,
    5e-324,
    0.5,
    -0.0,
    float("nan"),
    float("inf"),
    float("-inf"),
)
NASTY_TEXT: tuple[str, ...] = (
    "",
    " ",
    "\x00",
    "\n",
    "\ud800",  # a lone surrogate: valid in JSON text, not encodable as UTF-8
    "\u202e",
    "²",
    "٣",
    "9" * 5000,
    "💥",
    "a" * 300,
    "../../etc/passwd",
    "${HOME}",
    "1e999",
)

# keys that look like indices (NeuronCore and device numbers are keys in reports)
KEY_NAMES: tuple[str, ...] = ("0", "1", "-1", "01", "99999999999999999999", "9" * 5000, "²", "٣", "", "error")

json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(EXTREME_NUMBERS),
    st.integers(),
    st.floats(),
    st.sampled_from(NASTY_TEXT),
    st.text(max_size=12),
)
json_values = st.recursive(
    json_leaves,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@st.composite
def mutated(draw: st.DrawFn, base: Any, max_mutations: int = 3) -> Any:
    """``base`` (a JSON document) with a few random changes: a value replaced by an arbitrary one
    (wrong type, extreme number, nasty text, a nested structure), a key removed, an unknown key
    added, a value wrapped in a list."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, max_mutations))):
        doc = _mutate_once(draw, doc)
    return doc


def _node_paths(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _node_paths(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _node_paths(value, (*path, index))


def _mutate_once(draw: st.DrawFn, doc: Any) -> Any:
    """One change at a place drawn uniformly among all the document's nodes."""
    path = draw(st.sampled_from(list(_node_paths(doc))))
    parent: Any = None
    key: Any = None
    node = doc
    for key in path:
        parent, node = node, node[key]
    action = draw(st.sampled_from(("replace", "replace", "delete", "add", "wrap", "rename")))
    if action == "add" and isinstance(node, dict):
        node[draw(st.text(max_size=10))] = draw(json_values)
        return doc
    if action == "delete" and parent is not None:
        del parent[key]
        return doc
    if action == "rename" and isinstance(parent, dict):
        parent[draw(st.one_of(st.sampled_from(KEY_NAMES), st.text(max_size=6)))] = parent.pop(key)
        return doc
    if action == "wrap":
        new = [node]
    elif isinstance(node, int | float) and not isinstance(node, bool) and draw(st.booleans()):
        new = draw(st.sampled_from(EXTREME_NUMBERS))  # a number is most likely read as one: push it
    else:
        new = draw(json_values)
    if parent is None:
        return new
    parent[key] = new
    return doc


@st.composite
def extremes(draw: st.DrawFn, base: Any) -> Any:
    """``base`` with many of its numbers made extreme and its index-like keys made odd at once: a
    single mutation rarely lands on the one number a reader converts."""

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                (draw(st.sampled_from(KEY_NAMES)) if key.isdigit() and draw(st.integers(0, 3)) == 0 else key): walk(v)
                for key, v in node.items()
            }
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, int | float) and not isinstance(node, bool) and draw(st.booleans()):
            return draw(st.sampled_from(EXTREME_NUMBERS))
        return node

    return walk(base)


@st.composite
def one_extreme(draw: st.DrawFn, base: Any) -> Any:
    """``base`` with one of its numbers (drawn uniformly) replaced by an extreme one."""
    doc = copy.deepcopy(base)
    numeric = [p for p in _node_paths(doc) if p and _is_number(_at(doc, p))]
    if not numeric:
        return doc
    path = draw(st.sampled_from(numeric))
    _at(doc, path[:-1])[path[-1]] = draw(st.sampled_from(EXTREME_NUMBERS))
    return doc


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def dumps(value: Any) -> bytes:
    """JSON as Python writes it: NaN and Infinity literals allowed, lone surrogates escaped."""
    return json.dumps(value).encode()


@st.composite
def garbled(draw: st.DrawFn, text: bytes) -> bytes:
    """Raw damage to a serialized document: truncated, bytes dropped or inserted (invalid
    UTF-8 among them), deeply nested, a byte-order mark, a huge number literal."""
    kind = draw(st.sampled_from(("truncate", "insert", "drop", "nest", "bom", "number", "binary")))
    at = draw(st.integers(0, max(len(text) - 1, 0)))
    if kind == "truncate":
        return text[:at]
    if kind == "insert":
        return (
            text[:at]
            + draw(st.sampled_from((b"\xff", b"\xc3", b"\x00", b"\xed\xa0\x80", b"}", b'"', b",")))
            + text[at:]
        )
    if kind == "drop":
        return text[:at] + text[at + draw(st.integers(1, 8)) :]
    if kind == "nest":
        depth = draw(st.sampled_from((50, 1000, 100_000)))
        return b"[" * depth + text + b"]" * depth
    if kind == "bom":
        return b"\xef\xbb\xbf" + text
    if kind == "number":
        return (
            text[:at] + draw(st.sampled_from((b"1e999", b"-", b"9" * 5000, b"NaN", b"-Infinity", b"0x10"))) + text[at:]
        )
    return draw(st.binary(max_size=200))


def documents(base: Any) -> st.SearchStrategy[bytes]:
    """Serialized variants of ``base``: mutated (still JSON) or garbled (maybe not)."""
    return st.one_of(
        mutated(base).map(dumps),
        one_extreme(base).map(dumps),
        extremes(base).map(dumps),
        garbled(dumps(base)),
        json_values.map(dumps),
    )


# -- calling an ASGI app in-process -------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class AsgiClient:
    """A blocking HTTP client for an ASGI app in this process (no server, no lifespan): each call
    runs the app on a fresh event loop in the calling thread, with a deadline."""

    def __init__(self, app: Any, headers: Mapping[str, str] | None = None, timeout: float = REQUEST_TIMEOUT_S) -> None:
        self.app = app
        self.headers = dict(headers or {})
        self.timeout = timeout

    def request(
        self,
        method: str,
        target: str,
        body: bytes | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        chunks: Sequence[bytes] | None = None,
    ) -> Reply:
        """``chunks``: send the body in pieces without a Content-Length (chunked upload)."""
        path, _, query = target.partition("?")
        pending = list(chunks) if chunks is not None else [body or b""]
        sent = {"status": 0, "headers": {}, "body": b""}
        hdrs = [(b"host", b"testserver")]
        hdrs += [(k.lower().encode(), v.encode("latin-1")) for k, v in {**self.headers, **(headers or {})}.items()]
        if chunks is None and body is not None:
            hdrs.append((b"content-length", str(len(body)).encode()))
            if not any(k == b"content-type" for k, _ in hdrs):
                hdrs.append((b"content-type", b"application/json"))

        async def run() -> None:
            finished = asyncio.Event()

            async def receive() -> dict[str, Any]:
                if pending:
                    piece = pending.pop(0)
                    return {"type": "http.request", "body": piece, "more_body": bool(pending)}
                await finished.wait()
                return {"type": "http.disconnect"}

            async def send(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    sent["status"] = message["status"]
                    sent["headers"] = {k.decode().lower(): v.decode("latin-1") for k, v in message.get("headers", [])}
                elif message["type"] == "http.response.body":
                    sent["body"] += message.get("body", b"")
                    if not message.get("more_body", False):
                        finished.set()

            scope = {
                "type": "http",
                "asgi": {"version": "3.0"},
                "http_version": "1.1",
                "method": method,
                "scheme": "http",
                "path": path,
                "raw_path": path.encode(),
                "root_path": "",
                "query_string": query.encode(),
                "headers": hdrs,
                "client": ("127.0.0.1", 40000),
                "server": ("testserver", 80),
                "state": {},
            }
            await asyncio.wait_for(self.app(scope, receive, send), self.timeout)

        asyncio.run(run())
        return Reply(int(sent["status"]), sent["headers"], sent["body"])  # type: ignore[arg-type]

    def get(self, target: str) -> Reply:
        return self.request("GET", target)

    def post(self, target: str, payload: Any) -> Reply:
        return self.request("POST", target, json.dumps(payload).encode())


class AsgiDaemonSource:
    """What the exporter's collector and neuron-monitor read (``get(path)`` under ``/v1``),
    served by the daemon app in this process."""

    def __init__(self, app: Any) -> None:
        self.client = AsgiClient(app, AUTH)

    def get(self, path: str) -> Any:
        reply = self.client.get("/v1" + path)
        data = reply.json() if reply.body else None
        if reply.status >= 400:
            raise DaemonError(reply.status, data if isinstance(data, dict) else {"error": str(data)})
        return data

    def post(self, path: str, body: Any) -> Any:
        reply = self.client.post("/v1" + path, body)
        if reply.status >= 400:
            raise DaemonError(reply.status, reply.json())
        return reply.json() if reply.body else None

    def delete(self, path: str) -> Any:
        reply = self.client.request("DELETE", "/v1" + path)
        if reply.status >= 400:
            raise DaemonError(reply.status, reply.json())
        return reply.json()


# -- the targets ---------------------------------------------------------------------------------------


def daemon_app(instance_type: str = "trn1.32xlarge") -> Any:
    """A fresh daemon app (its own registry and telemetry) that the fuzzer can change: it holds
    the bearer token, and every PID in ``LIVE_PIDS`` counts as a running process."""
    inventory = build_inventory(instance_type, make_identity(instance_type, seed="fuzz"))
    registry = Registry(inventory, start_time_of=lambda pid: 1.0 if pid in LIVE_PIDS else None)
    return create_app(registry, DaemonInfo(address="in-process"), access=Access(token=TOKEN))


def execution_body(core: int, start: float, seconds: float = 0.05) -> dict[str, Any]:
    return {
        "core": core,
        "start": start,
        "device_seconds": seconds,
        "compute_seconds": seconds,
        "total_latency": seconds * 1.2,
        "flops": 10**12,
        "engines": {"tensor": seconds * 0.6, "vector": seconds * 0.2, "dma": seconds * 0.1},
        "outcome": "completed",
        "model": {"model_id": 10001, "uuid": "0" * 32, "name": "fuzz-model", "code_bytes": 1 << 20},
        "compile_cache": {"hits": 3, "misses": 1},
        "collectives": [{"kind": "all_reduce", "bytes": 1 << 20, "ranks": 2, "count": 4}],
        "memory": {"core": dict.fromkeys(CORE_MEMORY_KEYS, 1 << 20), "peak": 5 << 20},
    }


def seed_daemon(client: AsgiClient) -> None:
    """Attach the seeded runtime processes and the tool if they are not (any more), and give each
    runtime process a few executions, so the fuzzer reaches the paths behind "is attached"."""
    attached = {p["pid"]: p for p in client.get("/v1/processes").json()}
    for pid, cores in SEEDED.items():
        if pid not in attached:
            reply = client.post("/v1/processes", {"pid": pid, "command": f"python3 train{pid}.py", "num_cores": cores})
            if reply.status != 201:
                continue  # the fuzzer holds the cores: the next seeding tries again
            attached[pid] = reply.json()
        now = client.get("/v1/snapshot?latencies_since=1e11").json()["monotonic"]
        batch = [execution_body(core, now - 0.1 + 0.01 * i) for i, core in enumerate(attached[pid]["neuroncores"])]
        client.post(f"/v1/processes/{pid}/executions/batch", {"executions": batch})
    if SEEDED_TOOL not in attached:
        client.post("/v1/processes", {"pid": SEEDED_TOOL, "command": "neuron-top", "kind": "tool"})


def exporter_app(daemon: Any, interval: float = 0.1) -> tuple[Any, Any]:
    """neuron-exporter's app collecting from ``daemon`` (an in-process daemon app) every
    ``interval`` seconds once its lifespan runs; returns (app, collector)."""
    from neurontools.exporter.app import Exposition
    from neurontools.exporter.app import create_app as create_exporter_app
    from neurontools.exporter.collector import Collector, CompatFeed

    collector = Collector(AsgiDaemonSource(daemon), interval, compat=CompatFeed.load())
    collector.collect_once()
    collector.collect_once()  # two collections: rates and the report exist from the start
    return create_exporter_app(collector, Exposition(collector, per_process=True)), collector


# -- consistency after fuzzing ----------------------------------------------------------------------


def daemon_problems(daemon: Any) -> list[str]:
    """What is wrong with the daemon's state as its clients see it (empty: consistent): every read
    answers and parses, core ownership is exclusive, counters are finite and not negative, and
    the tools (neuron-ls -j's rendering, a neuron-monitor report, an exporter collection) work."""
    from neurontools.contract.snapshot import snapshot_from_dict
    from neurontools.exporter.app import Exposition
    from neurontools.exporter.collector import Collector, CompatFeed
    from neurontools.ls.render import render_json
    from neurontools.monitor.config import default_config
    from neurontools.report.builder import ReportBuilder
    from neurontools.report.encoding import encode_report

    client = AsgiClient(daemon, AUTH)
    problems: list[str] = []
    replies = {path: client.get("/v1" + path) for path in ("/status", "/processes", "/inventory", "/snapshot")}
    for path, reply in replies.items():
        if reply.status != 200:
            problems.append(f"GET /v1{path}: {reply.status} {reply.body[:200]!r}")
    if problems:
        return problems
    status, processes = replies["/status"].json(), replies["/processes"].json()
    inventory = inventory_from_dict(replies["/inventory"].json())
    json.loads(render_json(inventory, wide=True, show_all=True))  # what neuron-ls -j -a prints
    owners: dict[int, int] = {}
    for proc in processes:
        for core in proc["neuroncores"]:
            if core in owners:
                problems.append(f"NeuronCore {core} held by {owners[core]} and {proc['pid']}")
            if not 0 <= core < status["neuroncores_total"]:
                problems.append(f"process {proc['pid']} holds NeuronCore {core}, which does not exist")
            owners[core] = proc["pid"]
        if client.get(f"/v1/processes/{proc['pid']}").status != 200:
            problems.append(f"process {proc['pid']} is listed but GET /v1/processes/{proc['pid']} fails")
        if client.get(f"/v1/processes/{proc['pid']}/memory").status != 200:
            problems.append(f"GET /v1/processes/{proc['pid']}/memory fails")
    if status["processes"] != len(processes) or status["neuroncores_in_use"] != len(owners):
        problems.append(f"/v1/status {status} disagrees with /v1/processes ({len(processes)}, {len(owners)} cores)")
    if len(inventory.processes) != len(processes):
        problems.append("/v1/inventory and /v1/processes list different processes")
    snapshot = snapshot_from_dict(replies["/snapshot"].json())
    runtime = {p["pid"] for p in processes if p["kind"] == RUNTIME}
    if {p.pid for p in snapshot.runtime_processes} != runtime:
        problems.append("the snapshot's runtime processes differ from /v1/processes")
    for proc in [*snapshot.processes, *([snapshot.retired] if snapshot.retired else [])]:
        for core, counters in proc.cores.items():
            values = [counters.busy, counters.flops, *counters.engines.values()]
            if not all(math.isfinite(v) and v >= 0 for v in values):
                problems.append(f"process {proc.pid} core {core}: counters {values}")
        if any(v < 0 for v in vars(proc.executions).values()):
            problems.append(f"process {proc.pid}: negative execution counts {vars(proc.executions)}")
    builder = ReportBuilder(default_config())
    due = default_config().group_keys()
    for _ in range(2):
        json.loads(encode_report(builder.update(snapshot_from_dict(client.get("/v1/snapshot").json()), due)))
    collector = Collector(AsgiDaemonSource(daemon), 1.0, compat=CompatFeed.load())
    exposition = Exposition(collector, per_process=True)
    for _ in range(2):
        state = collector.collect_once()
        exposition.render()
    if not state.ready:
        problems.append(f"the exporter cannot collect from the daemon: {state.error}")
    exposition.scrape()
    return problems


@contextlib.contextmanager
def served_on_unix_socket(app: Any, path: str) -> Iterator[str]:
    """Serve ``app`` (no lifespan) on a Unix socket under uvicorn in a thread, for real clients
    (``neuron-ls -j``); stopped and the socket removed on exit."""
    import uvicorn

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="error", access_log=False))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        yield path
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


# -- schemathesis ---------------------------------------------------------------------------------------


def schemathesis_run(
    app: Any,
    target: str,
    stats: FuzzStats,
    *,
    examples: int,
    heavy_examples: int | None = None,
    overrides: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    before_operation: Callable[[], None] | None = None,
    seed: int | None = None,
) -> None:
    """Every operation of ``app``'s OpenAPI schema, positive and negative data, ``examples``
    each (``heavy_examples`` for operations whose bodies are lists of objects). ``overrides``: per
    operation label, fixed parameters to mix in (e.g. PIDs that are attached), each as
    ``as_strategy`` keyword arguments. Every answer must come within the timeout, below 500, and
    a 4xx must be a JSON object with an ``error``."""
    import schemathesis
    from schemathesis import GenerationMode
    from schemathesis.python.asgi import shutdown_lifespans

    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    try:
        for result in schema.get_all_operations():
            operation = result.ok()
            label = operation.label
            heavy = "batch" in operation.path
            n = heavy_examples if heavy and heavy_examples is not None else examples
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                strategies = [operation.as_strategy(generation_mode=mode)]
                for kwargs in (overrides or {}).get(label, ()):
                    strategies.append(operation.as_strategy(generation_mode=mode, **kwargs))
                if before_operation is not None:
                    before_operation()

                def check(case: Any, label: str = label, mode: GenerationMode = mode) -> None:
                    stats.count(f"{target} {label}")
                    try:
                        response = case.call(headers=AUTH, timeout=REQUEST_TIMEOUT_S)
                    except Exception as exc:  # a hang (timeout) or the app raising through the server
                        stats.fail(f"{target} {label} [{mode.value}]", f"{exc!r}: {case.as_curl_command()}")
                        return
                    problem = _reply_problem(response.status_code, response.headers, response.content)
                    if problem:
                        stats.fail(f"{target} {label} [{mode.value}]", f"{problem}: {case.as_curl_command()}")

                run_given(st.one_of(strategies), n, check, seed=seed)
    finally:
        shutdown_lifespans()


def _reply_problem(status: int, headers: Mapping[str, Any], body: bytes) -> str:
    if status >= 500:
        return f"HTTP {status} {body[:300]!r}"
    if status >= 400:
        ctype = next((str(v) for k, v in headers.items() if k.lower() == "content-type"), "")
        try:
            data = json.loads(body)
        except ValueError:
            return f"HTTP {status} without a JSON body ({ctype}): {body[:200]!r}"
        if not isinstance(data, dict) or not isinstance(data.get("error"), str) or not data["error"]:
            return f"HTTP {status} body is not {{'error': ...}}: {body[:200]!r}"
    return ""


def daemon_overrides() -> dict[str, list[dict[str, Any]]]:
    """Path parameters of attached processes, mixed into the PID operations' generated ones."""
    pids = [*SEEDED, SEEDED_TOOL]
    ops = (
        "GET /v1/processes/{pid}",
        "DELETE /v1/processes/{pid}",
        "POST /v1/processes/{pid}/executions",
        "POST /v1/processes/{pid}/executions/batch",
        "GET /v1/processes/{pid}/memory",
    )
    return {op: [{"path_parameters": {"pid": pid}} for pid in pids] for op in ops}


def exporter_overrides() -> dict[str, list[dict[str, Any]]]:
    from neurontools.exporter.rest import HISTORY_METRICS

    return {"GET /api/v1/history": [{"query": {"metric": name}} for name in HISTORY_METRICS]}


def fuzz_daemon_api(stats: FuzzStats, *, examples: int, heavy_examples: int, seed: int | None = None) -> Any:
    """schemathesis over a fresh daemon app; returns the app for the consistency checks."""
    app = daemon_app()
    client = AsgiClient(app, AUTH)
    schemathesis_run(
        app,
        "daemon",
        stats,
        examples=examples,
        heavy_examples=heavy_examples,
        overrides=daemon_overrides(),
        before_operation=lambda: seed_daemon(client),
        seed=seed,
    )
    return app


def fuzz_exporter_api(stats: FuzzStats, *, examples: int, seed: int | None = None) -> tuple[Any, Any]:
    """schemathesis over neuron-exporter's app collecting from a fresh, busy daemon app."""
    daemon = daemon_app()
    seed_daemon(AsgiClient(daemon, AUTH))
    app, collector = exporter_app(daemon)
    schemathesis_run(app, "exporter", stats, examples=examples, overrides=exporter_overrides(), seed=seed)
    return app, collector


# -- hand-made hostile requests ----------------------------------------------------------------------


def _quoted(text: str) -> str:
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


def daemon_requests(now: float) -> st.SearchStrategy[tuple[str, str, bytes | None]]:
    """Requests schemathesis does not make: bodies mutated from valid ones into what JSON (as
    Python reads it) still carries — NaN and Infinity, numbers past any range, lone surrogates —
    or into broken JSON; odd query values and path segments."""
    pid = next(iter(SEEDED))
    execution = execution_body(0, now - 0.5)
    attach = {"pid": 10, "command": "python3 x.py", "tag": "t", "num_cores": 2, "origin": "fuzz"}
    ecc = {"neuron_device": 1, "event_type": "mem_ecc_corrected", "count": 2}
    odd = st.one_of(
        st.sampled_from(NASTY_TEXT), st.text(max_size=12), st.sampled_from(("nan", "inf", "-1e999", "1e11"))
    )
    return st.one_of(
        documents(execution).map(lambda b: ("POST", f"/v1/processes/{pid}/executions", b)),
        st.lists(mutated(execution), min_size=1, max_size=4).map(
            lambda xs: ("POST", f"/v1/processes/{pid}/executions/batch", dumps({"executions": xs}))
        ),
        documents({"executions": [execution]}).map(lambda b: ("POST", f"/v1/processes/{pid}/executions/batch", b)),
        documents(attach).map(lambda b: ("POST", "/v1/processes", b)),
        documents(ecc).map(lambda b: ("POST", "/v1/faults/ecc", b)),
        odd.map(lambda q: ("GET", f"/v1/snapshot?latencies_since={_quoted(q)}", None)),
        st.tuples(st.sampled_from(("GET", "DELETE")), odd).map(
            lambda t: (t[0], f"/v1/processes/{_quoted(t[1])}", None)
        ),
        odd.map(lambda p: ("GET", f"/v1/processes/{_quoted(p)}/memory", None)),
    )


def fuzz_daemon_requests(stats: FuzzStats, examples: int, seed: int | None = None) -> Any:
    """Hostile requests at a fresh daemon app; after each, the snapshot must still be served and
    parse (a poisoned counter would break every tool). Returns the app."""
    from neurontools.contract.snapshot import SnapshotError, snapshot_from_dict

    app = daemon_app()
    client = AsgiClient(app, AUTH)
    seed_daemon(client)
    now = client.get("/v1/snapshot?latencies_since=1e11").json()["monotonic"]
    sent = 0

    def check(request: tuple[str, str, bytes | None]) -> None:
        nonlocal sent
        method, target, body = request
        label = f"daemon {method} {target.split('?')[0][:40]}"
        stats.count("daemon hostile requests")
        sent += 1
        if sent % 25 == 0:
            seed_daemon(client)  # hostile detaches and attaches change who holds what
        shown = f"{method} {target[:200]} {body[:300] if body else b''!r}"
        try:
            reply = client.request(method, target, body)
        except Exception as exc:
            stats.fail(label, f"{exc!r}: {shown}")
            return
        problem = _reply_problem(reply.status, reply.headers, reply.body)
        if problem:
            stats.fail(label, f"{problem}: {shown}")
        try:
            after = client.get("/v1/snapshot")
            if after.status != 200:
                raise SnapshotError(f"HTTP {after.status} {after.body[:200]!r}")
            snapshot_from_dict(after.json())
        except Exception as exc:  # (SnapshotError, or the app failing outright)
            stats.fail(label, f"the snapshot is broken after {shown}: {exc!r}")

    run_given(daemon_requests(now), examples, check, seed=seed)
    return app


def exporter_requests() -> st.SearchStrategy[str]:
    from neurontools.exporter.rest import HISTORY_METRICS

    odd = st.one_of(st.sampled_from(NASTY_TEXT), st.text(max_size=12), st.sampled_from(("nan", "-inf", "1e308", "-1")))
    metric = st.one_of(st.sampled_from(sorted(HISTORY_METRICS)), odd)
    history = st.tuples(metric, st.one_of(st.none(), odd), st.one_of(st.none(), odd)).map(
        lambda t: (
            "/api/v1/history?metric="
            + _quoted(t[0])
            + (f"&neuroncore={_quoted(t[1])}" if t[1] is not None else "")
            + (f"&since={_quoted(t[2])}" if t[2] is not None else "")
        )
    )
    paths = odd.map(lambda p: f"/api/v1/{_quoted(p)}")
    return st.one_of(history, history, paths, st.sampled_from(("/metrics?name[]=x", "/readyz?x=%ff", "/api/v1/report")))


def fuzz_exporter_requests(stats: FuzzStats, examples: int, seed: int | None = None) -> None:
    """Odd query values and paths at neuron-exporter's app; /metrics must keep rendering."""
    daemon = daemon_app()
    seed_daemon(AsgiClient(daemon, AUTH))
    app, _ = exporter_app(daemon)
    client = AsgiClient(app)

    def check(target: str) -> None:
        stats.count("exporter hostile requests")
        try:
            reply = client.get(target)
        except Exception as exc:
            stats.fail("exporter GET", f"{exc!r}: {target[:300]}")
            return
        problem = _reply_problem(reply.status, reply.headers, reply.body)
        if problem:
            stats.fail("exporter GET", f"{problem}: {target[:300]}")

    run_given(exporter_requests(), examples, check, seed=seed)
    if client.get("/metrics").status != 200:
        stats.fail("exporter GET /metrics", "does not render after the requests")
