"""Scrape latency and exporter CPU on an emulated trn1.32xlarge running a real training job, in one run.

    .venv/bin/python benchmarks/exporter_scrape.py [--scrapes 200] [--rate 10] [--job gpt3-6.7b-tp8dp4]

Load: one daemon (``neuron-emulator up --instance-type trn1.32xlarge``) on a temporary socket and a
published Trn1 training job on all 32 NeuronCores through ``neuron-emulator run`` (emulated_job.py):
``--job gpt3-6.7b-tp8dp4`` (default; ``gpt3-6.7b --tp 8 --dp 4 --global-batch 64``) or
``bert-large-dp32`` (``bert-large --dp 32 --micro-batch 16 --global-batch 16384 --seq-len 128``). The
launcher traces the step once, then 32 rank processes replay it on the daemon at the modelled pace
(92.9 % or 80.0 % of each core's time), as a torchrun job's 32 processes would appear. The start-up
(ranks attached, first execution, end of step 1), the job's memory, how many cores are really busy
(busy-time delta > 0 in the daemon's ``/v1/snapshot``) and the load's own CPU are printed. The job
runs until the end of the benchmark (a fresh compile cache: about 30 s of simulated compile first).

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
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from emulated_job import (
    BIN,
    CORES,
    INSTANCE_TYPE,
    JOBS,
    BenchError,
    Busy,
    Job,
    LoadMeter,
    Run,
    add_job_option,
    benchmark_parser,
    busy_between,
    cpu_seconds,
    free_port,
    missing_tools,
    process_tree,
    rss_bytes,
    run_benchmark,
    stop_process,
    tail,
)

NODE_EXPORTER = "prometheus-node-exporter"
DEFAULT_JOB = "gpt3-6.7b-tp8dp4"
JOB_STEPS = 100_000  # the job runs until the benchmark stops it
MIB = 2**20
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


# -- the load: a real training job on all 32 NeuronCores -----------------------------------------------


def start_load(run: Run, job: Job) -> None:
    """Start ``job`` on the daemon, wait until it is past step 1 and print what that took."""
    print(f"load: {job.command} (a fresh compile cache; runs until the end)")
    started = run.start_job(job, JOB_STEPS)
    run.wait_started(started)
    assert started.attached is not None and started.first_execution is not None
    _, trace_seconds, compile_seconds = started.traced() or (0, float("nan"), 60.0)
    run.wait_step(started, 1, timeout=compile_seconds + 120)
    step1 = started.step_ends()[1] - started.started
    ranks = started.ranks()
    rank_rss = rss_bytes(ranks)
    launcher_rss = rss_bytes([p for p in started.processes() if p not in ranks])
    print(
        f"  start-up: {len(ranks)} ranks attached {started.attached:.1f} s after the command (tracing "
        f"{trace_seconds:.1f} s), first execution {started.first_execution:.1f} s ({compile_seconds:.1f} s "
        f"simulated compile), step 1 ended at {step1:.1f} s"
    )
    print(
        f"  memory: ranks {rank_rss / MIB:,.0f} MiB RSS in total ({rank_rss / max(1, len(ranks)) / MIB:.1f} MiB "
        f"each), launcher {launcher_rss / MIB:,.0f} MiB"
    )


def check_load(run: Run) -> None:
    """Print how many cores are busy and what the load itself costs the host, over two steps (the
    cores idle in bursts within a step, so a window of whole steps shows the steady share)."""
    assert run.job is not None
    step = run.job.step_seconds()
    seconds = 2 * step if step else 10.0
    meter = LoadMeter(run, run.job)
    time.sleep(seconds)
    busy, cpu = meter.stop()
    print(
        f"  busy cores: {busy.cores} of {CORES} (busy-time delta > 0 over {seconds:.1f} s in /v1/snapshot), "
        f"mean utilization {100 * busy.utilization:.1f}%; the load (daemon, launcher, ranks) used "
        f"{100 * cpu:.1f}% of one core"
    )


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


def print_results(results: list[Result], scrapes: int, rate: float, job: Job) -> None:
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
    print(
        f"  daemon %: the emulator daemon in the same window (serves the {CORES} ranks of {job.title} "
        "and the tools' snapshots)"
    )
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


def parse_args() -> argparse.Namespace:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--scrapes", type=int, default=200, help="scrapes per exporter (default 200)")
    parser.add_argument("--rate", type=float, default=10.0, help="scrapes per second (default 10)")
    add_job_option(parser, DEFAULT_JOB)
    args = parser.parse_args()
    if args.scrapes < 1:
        parser.error("--scrapes must be at least 1")
    if not 0 < args.rate <= 1000:
        parser.error("--rate must be in (0, 1000]")
    return args


def main() -> int:
    args = parse_args()
    job = JOBS[args.job]
    tools = ("neuron-emulator", "neuron-monitor", "neuron-monitor-prometheus", "neuron-exporter")
    if missing_tools("exporter_scrape", *tools):
        return 1
    node_exporter = shutil.which(NODE_EXPORTER) or (
        f"/usr/bin/{NODE_EXPORTER}" if Path(f"/usr/bin/{NODE_EXPORTER}").exists() else None
    )
    if node_exporter is None:
        print(
            f"note: {NODE_EXPORTER} is not installed, so that peer is skipped "
            f"(install it with: apt-get install -y {NODE_EXPORTER})"
        )

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

    results: list[Result] = []

    def measure_peers(run: Run) -> None:
        run.start_daemon()
        print(
            f"host: {psutil.cpu_count()} vCPUs, {psutil.virtual_memory().total / 2**30:.1f} GiB RAM; "
            f"emulated {INSTANCE_TYPE} at {run.address}"
        )
        start_load(run, job)
        check_load(run)
        for peer in peers:
            print(f"measuring {peer.name} ...", flush=True)
            results.append(measure(run, peer, args.scrapes, args.rate))

    return run_benchmark(
        "exporter_scrape",
        "nt-scrape-bench-",
        measure_peers,
        lambda: print_results(results, args.scrapes, args.rate, job),
    )


if __name__ == "__main__":
    sys.exit(main())
