"""Scrape latency and exporter CPU on an emulated trn1.32xlarge with every NeuronCore busy, in one run.

    .venv/bin/python benchmarks/exporter_scrape.py [--scrapes 200] [--rate 10] [--procs 32]

Load: one daemon (``neuron-emulator up --instance-type trn1.32xlarge``) on a temporary socket and
``--procs`` training processes, one per NeuronCore (``NEURON_RT_VISIBLE_CORES=i``). Each trains an
8-layer, 8192-wide MLP on PyTorch's ``meta`` device (batch 16384, fp32, SGD) through
``emulator.xla``: every step is captured, costed and executed on its emulated core (about 2.2 s of
simulated device time for about 10 ms of host CPU), so 32 of them keep 32 cores executing on a
2-vCPU machine. They are started a few at a time; the start-up time, their memory and how many
cores were really busy (busy-time delta > 0 in the daemon's ``/v1/snapshot``) are printed.

Peers, measured one after the other under that same load (only the measured one runs):

  node-exporter     Debian ``prometheus-node-exporter`` (collects on the scrape path); skipped with a
                    message when it is not installed
  gauge-per-update  ``neuron-monitor -c <period 1s> | neuron-monitor-prometheus``, built the way the
                    official ``neuron-monitor-prometheus.py`` is: every report sets the gauges and
                    increments the counters; its CPU is both processes together
  neuron-exporter   ``neuron-exporter --interval 1`` (background collection, scrapes read the state)

For each: wait until it serves data, warm up, then ``--scrapes`` GETs of ``/metrics`` paced at
``--rate`` per second (loopback only, a new connection each, plain text 0.0.4 without gzip), bounded
by a deadline. Latency = request sent to last body byte. CPU = user + system seconds of the
exporter's processes over the window, as % of one core; the daemon's CPU in the same window is shown
for context (the neuron tools read a snapshot from it every second; node-exporter does not).

Prints figures; asserts nothing. Every process it starts and the temporary socket are removed at
the end, also on Ctrl-C and errors.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from neurontools.sources.address import parse_address
from neurontools.sources.daemon_client import DaemonClient, DaemonError, DaemonUnavailable

BIN = Path(sys.executable).parent
NODE_EXPORTER = "prometheus-node-exporter"
INSTANCE_TYPE = "trn1.32xlarge"
CORES = 32
WORKER_FLAG = "--busy-worker"
WIDTH, LAYERS, BATCH = 8192, 8, 16384  # ~2.2 s simulated per step, ~9 GiB of the core's 16 GiB HBM
WORKER_RSS = 400 * 2**20  # a little above what one worker process holds (~310 MB)
STARTING_AT_ONCE = 3  # workers importing torch at the same time (the import is the CPU-heavy part)
SCRAPE_TIMEOUT = 10.0
READY_TIMEOUT = 45.0
WARMUP_SECONDS = 2.0
WARMUP_SCRAPES = 5
ACCEPT = "text/plain;version=0.0.4"
COMPAT_FAMILY = b"neuroncore_utilization_ratio{"  # present once a report with busy cores went through
MONITOR_CONFIG = {
    "period": "1s",
    "neuron_runtimes": [
        {
            "tag_filter": ".*",
            "metrics": [
                {"type": "neuroncore_counters"},
                {"type": "memory_used"},
                {"type": "neuron_runtime_vcpu_usage"},
                {"type": "execution_stats"},
            ],
        }
    ],
    "system_metrics": [{"type": "vcpu_usage"}, {"type": "memory_info"}, {"type": "neuron_hw_counters"}],
}


class Interrupted(Exception):
    """SIGTERM arrived."""


class BenchError(Exception):
    """The benchmark cannot go on; the message says why."""


# -- the load: one process per NeuronCore -----------------------------------------------------------


def busy_worker() -> int:
    """Runs in a child process: claim the core(s) of NEURON_RT_VISIBLE_CORES and train until killed."""
    import torch

    import emulator.xla as xm

    try:
        device = xm.xla_device()
        with torch.device("meta"):
            model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])
        model = model.to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.empty(BATCH, WIDTH, device="meta").to(device)
        print("attached", flush=True)
        while True:
            opt.zero_grad(set_to_none=True)
            model(x).pow(2).mean().backward()
            xm.optimizer_step(opt)
    except xm.NeuronRuntimeError as exc:
        print(f"busy worker: {exc}", file=sys.stderr, flush=True)
        return 1


# -- processes --------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


def stop_process(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM the process's own group, then SIGKILL what is left after ``timeout``."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def process_tree(pids: list[int]) -> list[psutil.Process]:
    tree: list[psutil.Process] = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            tree += [proc, *proc.children(recursive=True)]
    return tree


@dataclass
class Busy:
    cores: int  # cores whose simulated busy time grew over the window
    utilization: float  # mean over those cores, busy delta / wall delta


def core_busy(snapshot: dict) -> dict[str, float]:
    busy: dict[str, float] = {}
    for proc in snapshot.get("processes", []):
        if proc.get("kind") != "runtime":
            continue
        for core, counters in (proc.get("cores") or {}).items():
            busy[core] = busy.get(core, 0.0) + float(counters.get("busy", 0.0))
    return busy


def busy_between(before: dict, after: dict) -> Busy:
    wall = after["monotonic"] - before["monotonic"]
    start, end = core_busy(before), core_busy(after)
    deltas = [end[c] - start[c] for c in end if c in start and end[c] - start[c] > 0]
    return Busy(len(deltas), statistics.fmean(deltas) / wall if deltas and wall > 0 else 0.0)


@dataclass
class Run:
    """Everything this benchmark starts; ``close()`` removes it all."""

    tmp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="nt-scrape-bench-", dir="/tmp")))
    daemon: subprocess.Popen | None = None
    workers: list[subprocess.Popen] = field(default_factory=list)
    peers: list[subprocess.Popen] = field(default_factory=list)
    client: DaemonClient | None = None

    @property
    def address(self) -> str:
        return str(self.tmp / "neuron-emulator.sock")

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_", "LOCAL_RANK", "RANK", "WORLD_SIZE"))}
        env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONUNBUFFERED"] = "1"
        env["NEURON_EMULATOR_ADDR"] = self.address
        env["NEURON_COMPILE_CACHE_URL"] = str(self.tmp / "compile-cache")
        env.update(extra)
        return env

    def spawn(self, argv: list[str], log: str, *, env: dict[str, str] | None = None, **popen: object):
        with open(self.tmp / log, "ab") as out:
            kwargs: dict[str, object] = {"stdout": out, "stderr": out, "stdin": subprocess.DEVNULL}
            kwargs.update(popen)
            return subprocess.Popen(argv, env=env or self.env(), start_new_session=True, **kwargs)  # type: ignore[call-overload]

    # daemon

    def start_daemon(self) -> None:
        argv = [str(BIN / "neuron-emulator"), "up", "--instance-type", INSTANCE_TYPE, "--socket", self.address]
        self.daemon = self.spawn(argv, "daemon.log")
        self.client = DaemonClient(parse_address(self.address), timeout=10)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.daemon.poll() is not None:
                raise BenchError(f"the daemon exited {self.daemon.returncode}: {tail(self.tmp / 'daemon.log')}")
            with contextlib.suppress(DaemonUnavailable, DaemonError):
                self.client.get("/status")
                return
            time.sleep(0.1)
        raise BenchError(f"the daemon did not answer within 30 s: {tail(self.tmp / 'daemon.log')}")

    def snapshot(self) -> dict:
        assert self.client is not None
        return self.client.get("/snapshot")

    # load

    def start_load(self, procs: int) -> float:
        """Start ``procs`` workers, a few at a time; returns seconds until every one attached."""
        t0 = time.monotonic()
        selector = selectors.DefaultSelector()
        starting: set[int] = set()
        deadline = t0 + 60 + 5 * procs
        try:
            while len(self.workers) < procs or starting:
                while len(self.workers) < procs and len(starting) < STARTING_AT_ONCE:
                    core = len(self.workers)
                    worker = self.spawn(
                        [sys.executable, str(Path(__file__).resolve()), WORKER_FLAG],
                        f"worker-nc{core}.log",
                        env=self.env(
                            NEURON_RT_VISIBLE_CORES=str(core),
                            NEURON_PROCESS_TAG=f"busy-nc{core}",
                            OMP_NUM_THREADS="1",
                        ),
                        stdout=subprocess.PIPE,
                    )
                    self.workers.append(worker)
                    starting.add(core)
                    assert worker.stdout is not None
                    selector.register(worker.stdout, selectors.EVENT_READ, core)
                if time.monotonic() > deadline:
                    raise BenchError(f"workers did not attach within {deadline - t0:.0f} s")
                for key, _ in selector.select(timeout=0.2):
                    core = key.data
                    line = key.fileobj.readline()  # type: ignore[union-attr]
                    selector.unregister(key.fileobj)
                    starting.discard(core)
                    if not line.startswith(b"attached"):
                        self.workers[core].wait(timeout=10)
                        raise BenchError(f"worker for nc{core} failed: {tail(self.tmp / f'worker-nc{core}.log')}")
        finally:
            selector.close()
        return time.monotonic() - t0

    def wait_executing(self, procs: int, timeout: float = 90.0) -> float:
        """Seconds until every worker finished its first two steps (both compile a graph), so it is in its loop."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            runtimes = [p for p in self.snapshot().get("processes", []) if p.get("kind") == "runtime"]
            done = [p for p in runtimes if (p.get("executions") or {}).get("completed", 0) >= 2]
            if len(done) >= procs:
                break
            time.sleep(0.5)
        return time.monotonic() - t0

    def load_rss(self) -> int:
        return sum(p.memory_info().rss for p in process_tree([w.pid for w in self.workers]))

    # cleanup

    def close(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not leave processes behind
            signal.signal(sig, signal.SIG_IGN)
        for proc in [*self.peers, *self.workers]:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in [*self.peers, *self.workers]:
            stop_process(proc)
            if proc.stdout is not None:
                proc.stdout.close()
        if self.daemon is not None:
            stop_process(self.daemon)
        shutil.rmtree(self.tmp, ignore_errors=True)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)


# -- peers and scrapes ----------------------------------------------------------------------------


@dataclass
class Peer:
    name: str
    describe: str
    start: Callable[[Run, int], list[subprocess.Popen]]  # (run, port) -> the exporter's processes
    marker: bytes | None  # the body holds this once the exporter serves the busy cores
    logs: tuple[str, ...]  # its log files in the run's directory


def start_node_exporter(binary: str) -> Callable[[Run, int], list[subprocess.Popen]]:
    def start(run: Run, port: int) -> list[subprocess.Popen]:
        argv = [binary, f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]
        return [run.spawn(argv, "node-exporter.log")]

    return start


def start_gauge_per_update(run: Run, port: int) -> list[subprocess.Popen]:
    config = run.tmp / "monitor.json"
    config.write_text(json.dumps(MONITOR_CONFIG))
    monitor = run.spawn([str(BIN / "neuron-monitor"), "-c", str(config)], "neuron-monitor.log", stdout=subprocess.PIPE)
    argv = [str(BIN / "neuron-monitor-prometheus"), "--bind", "127.0.0.1", "-p", str(port)]
    compat = run.spawn(argv, "neuron-monitor-prometheus.log", stdin=monitor.stdout)
    assert monitor.stdout is not None
    monitor.stdout.close()  # the pipe now belongs to the two children only
    monitor.stdout = None
    return [monitor, compat]


def start_neuron_exporter(run: Run, port: int) -> list[subprocess.Popen]:
    argv = [str(BIN / "neuron-exporter"), "--bind", "127.0.0.1", "--port", str(port), "--interval", "1"]
    return [run.spawn(argv, "neuron-exporter.log")]


def scrape(port: int) -> tuple[float, bytes]:
    """One GET /metrics over a new loopback connection: (seconds, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=SCRAPE_TIMEOUT)
    try:
        t0 = time.perf_counter()
        conn.request("GET", "/metrics", headers={"Accept": ACCEPT})
        response = conn.getresponse()
        body = response.read()
        elapsed = time.perf_counter() - t0
    finally:
        conn.close()
    if response.status != 200:
        raise BenchError(f"HTTP {response.status}")
    return elapsed, body


@dataclass
class Result:
    peer: Peer
    latencies: list[float]
    errors: int
    body_bytes: int
    series: int
    cpu_percent: float
    daemon_percent: float
    busy: Busy
    window: float
    split: list[float] = field(default_factory=list)  # CPU % of each of the peer's processes
    skipped: str = ""

    def quantile(self, q: int) -> float:
        if len(self.latencies) < 2:
            return self.latencies[0] if self.latencies else float("nan")
        return statistics.quantiles(self.latencies, n=100, method="inclusive")[q - 1]

    @property
    def p50(self) -> float:
        return self.quantile(50)

    @property
    def p99(self) -> float:
        return self.quantile(99)


def skipped(peer: Peer, reason: str) -> Result:
    return Result(peer, [], 0, 0, 0, float("nan"), float("nan"), Busy(0, 0.0), 0.0, skipped=reason)


def wait_ready(peer: Peer, procs: list[subprocess.Popen], port: int) -> str:
    """'' once ``port`` serves the peer's data, else why not."""
    deadline = time.monotonic() + READY_TIMEOUT
    reason = "no answer"
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                return f"exited with status {proc.returncode}"
        try:
            _, body = scrape(port)
        except (OSError, http.client.HTTPException, BenchError) as exc:
            reason = str(exc) or type(exc).__name__
        else:
            if peer.marker is None or peer.marker in body:
                return ""
            reason = "served no NeuronCore series yet"
        time.sleep(0.2)
    return f"not ready within {READY_TIMEOUT:g} s ({reason})"


def measure(run: Run, peer: Peer, scrapes: int, rate: float) -> Result:
    port = free_port()
    procs = peer.start(run, port)
    run.peers.extend(procs)
    try:
        problem = wait_ready(peer, procs, port)
        if problem:
            logs = " | ".join(filter(None, (tail(run.tmp / log) for log in peer.logs)))
            return skipped(peer, f"{problem}{': ' + logs if logs else ''}")
        time.sleep(WARMUP_SECONDS)
        for _ in range(WARMUP_SCRAPES):
            with contextlib.suppress(OSError, http.client.HTTPException, BenchError):
                scrape(port)
        trees = [process_tree([p.pid]) for p in procs]
        tree = [proc for part in trees for proc in part]
        daemon = process_tree([run.daemon.pid]) if run.daemon is not None else []
        latencies: list[float] = []
        errors = 0
        body = b""
        deadline = time.monotonic() + scrapes / rate * 1.5 + 10
        before = run.snapshot()
        parts0 = [cpu_seconds(part) for part in trees]
        cpu0, daemon0, t0 = cpu_seconds(tree), cpu_seconds(daemon), time.monotonic()
        for i in range(scrapes):
            due = t0 + i / rate
            now = time.monotonic()
            if now > deadline:
                break
            if due > now:
                time.sleep(due - now)
            try:
                elapsed, body = scrape(port)
            except (OSError, http.client.HTTPException, BenchError):
                errors += 1
            else:
                latencies.append(elapsed)
        t1, cpu1, daemon1 = time.monotonic(), cpu_seconds(tree), cpu_seconds(daemon)
        parts1 = [cpu_seconds(part) for part in trees]
        after = run.snapshot()
        window = t1 - t0
        series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
        return Result(
            peer,
            latencies,
            errors,
            len(body),
            series,
            100 * (cpu1 - cpu0) / window,
            100 * (daemon1 - daemon0) / window,
            busy_between(before, after),
            window,
            split=[100 * (b - a) / window for a, b in zip(parts0, parts1, strict=True)],
        )
    finally:
        for proc in procs:
            stop_process(proc)
            run.peers.remove(proc)


# -- report -------------------------------------------------------------------------------------------


def ratio(a: float, b: float) -> str:
    if not (a == a and b == b) or b <= 0:  # NaN or nothing to divide by
        return "   n/a"
    return f"{a / b:6.2f}x"


def print_results(results: list[Result], scrapes: int, rate: float, procs: int) -> None:
    print(f"\n{scrapes} scrapes of /metrics per exporter at {rate:g}/s, loopback, a new connection each, no gzip")
    head = (
        f"{'exporter':<18} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'bytes':>9} {'series':>7} "
        f"{'CPU %':>7} {'daemon %':>9} {'busy NC':>8} {'errors':>6}"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        if r.skipped:
            print(f"{r.peer.name:<18} skipped: {r.skipped}")
            continue
        print(
            f"{r.peer.name:<18} {r.p50 * 1e3:8.2f} {r.p99 * 1e3:8.2f} {max(r.latencies, default=0) * 1e3:8.2f} "
            f"{r.body_bytes:9,d} {r.series:7,d} {r.cpu_percent:7.2f} {r.daemon_percent:9.2f} "
            f"{r.busy.cores:>3d} {100 * r.busy.utilization:3.0f}% {r.errors:6d}"
        )
    print("  CPU %: exporter process(es), user+system over the window, % of one core")
    print(f"  daemon %: the emulator daemon in the same window (serves the {procs} workers and the tools' snapshots)")
    print("  busy NC: cores with growing simulated busy time during the window, and their mean utilization")
    for r in results:
        if not r.skipped:
            split = " + ".join(f"{p:.2f}%" for p in r.split) if len(r.split) > 1 else ""
            print(f"  {r.peer.name}: {r.peer.describe}{'; CPU % ' + split if split else ''}")

    by_name = {r.peer.name: r for r in results if not r.skipped and r.latencies}
    pairs = [
        ("neuron-exporter", "node-exporter"),
        ("neuron-exporter", "gauge-per-update"),
        ("gauge-per-update", "node-exporter"),
    ]
    print("\nratios (first / second; below 1 = first is faster or cheaper)")
    print(f"  {'':<38} {'p50':>7} {'p99':>7} {'CPU':>7}")
    for a, b in pairs:
        if a not in by_name or b not in by_name:
            print(f"  {a + ' / ' + b:<38} n/a ({b if b not in by_name else a} not measured)")
            continue
        ra, rb = by_name[a], by_name[b]
        print(
            f"  {a + ' / ' + b:<38} {ratio(ra.p50, rb.p50)} {ratio(ra.p99, rb.p99)} "
            f"{ratio(ra.cpu_percent, rb.cpu_percent)}"
        )


# -- main ---------------------------------------------------------------------------------------------


def _terminate(signum: int, frame: object) -> None:
    raise Interrupted


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=200, help="scrapes per exporter (default 200)")
    parser.add_argument("--rate", type=float, default=10.0, help="scrapes per second (default 10)")
    parser.add_argument("--procs", type=int, default=CORES, help=f"busy NeuronCores, 0-{CORES} (default {CORES})")
    parser.add_argument(WORKER_FLAG, action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.busy_worker:
        if args.scrapes < 1:
            parser.error("--scrapes must be at least 1")
        if not 0 < args.rate <= 1000:
            parser.error("--rate must be in (0, 1000]")
        if not 0 <= args.procs <= CORES:
            parser.error(f"--procs must be 0-{CORES}")
    return args


def main() -> int:
    args = parse_args()
    if args.busy_worker:
        return busy_worker()
    missing = [
        n
        for n in ("neuron-emulator", "neuron-monitor", "neuron-monitor-prometheus", "neuron-exporter")
        if not (BIN / n).exists()
    ]
    if missing:
        print(
            f"exporter_scrape: {', '.join(missing)} not found next to {sys.executable}; "
            "run with the project's .venv/bin/python",
            file=sys.stderr,
        )
        return 1
    node_exporter = shutil.which(NODE_EXPORTER) or (
        f"/usr/bin/{NODE_EXPORTER}" if Path(f"/usr/bin/{NODE_EXPORTER}").exists() else None
    )
    if node_exporter is None:
        print(
            f"note: {NODE_EXPORTER} is not installed, so that peer is skipped "
            f"(install it with: apt-get install -y {NODE_EXPORTER})"
        )

    procs = args.procs
    available = psutil.virtual_memory().available
    if procs * WORKER_RSS > available * 0.8:
        fit = int(available * 0.8 // WORKER_RSS)
        print(f"note: {available / 2**30:.1f} GiB available is too little for {procs} workers; using {fit}")
        procs = fit

    peers = [
        Peer(
            "gauge-per-update",
            "neuron-monitor -c (period 1s) | neuron-monitor-prometheus (2 processes)",
            start_gauge_per_update,
            COMPAT_FAMILY,
            ("neuron-monitor.log", "neuron-monitor-prometheus.log"),
        ),
        Peer(
            "neuron-exporter",
            "neuron-exporter --interval 1",
            start_neuron_exporter,
            COMPAT_FAMILY,
            ("neuron-exporter.log",),
        ),
    ]
    if node_exporter is not None:
        peers.insert(
            0,
            Peer(
                "node-exporter",
                f"{node_exporter} (Debian package)",
                start_node_exporter(node_exporter),
                None,
                ("node-exporter.log",),
            ),
        )

    signal.signal(signal.SIGTERM, _terminate)
    run = Run()
    t_start = time.monotonic()
    results: list[Result] = []
    try:
        run.start_daemon()
        print(
            f"host: {psutil.cpu_count()} vCPUs, {psutil.virtual_memory().total / 2**30:.1f} GiB RAM; "
            f"emulated {INSTANCE_TYPE} at {run.address}"
        )
        print(
            f"load: {procs} processes, one per NeuronCore, each training an {LAYERS}-layer {WIDTH}-wide MLP "
            f"on meta tensors (batch {BATCH}, fp32, SGD)"
        )
        if procs:
            started = run.start_load(procs)
            print(f"  start-up: {procs} processes attached in {started:.1f} s ({STARTING_AT_ONCE} starting at a time)")
            executing = run.wait_executing(procs)
            print(
                f"  every worker past its first two steps (graph compiles) {executing:.1f} s later; "
                f"workers hold {run.load_rss() / 2**30:.1f} GiB RSS"
            )
        before = run.snapshot()
        time.sleep(3)
        busy = busy_between(before, run.snapshot())
        load_cpu = cpu_seconds(process_tree([w.pid for w in run.workers]))
        print(
            f"  busy cores: {busy.cores} of {CORES} (busy-time delta > 0 over 3 s in /v1/snapshot), "
            f"mean utilization {100 * busy.utilization:.1f}%"
        )
        if run.workers:
            print(f"  host CPU of the workers so far: {load_cpu:.1f} s (mostly importing torch)")

        for peer in peers:
            print(f"measuring {peer.name} ...", flush=True)
            results.append(measure(run, peer, args.scrapes, args.rate))
    except (KeyboardInterrupt, Interrupted):
        print("\ninterrupted; cleaning up", file=sys.stderr)
        return 130
    except BenchError as exc:
        print(f"exporter_scrape: {exc}", file=sys.stderr)
        return 1
    finally:
        run.close()
    print_results(results, args.scrapes, args.rate, procs)
    print(f"\ntotal run time {time.monotonic() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
