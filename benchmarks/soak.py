"""Soak: a trn1.32xlarge at full load for a long time, every long-running component watched.

    python benchmarks/soak.py [--minutes 30] [--scrape-rate 10] [--sample-every 30]

What runs (all started here, all stopped at the end, also on Ctrl-C or SIGTERM):

- the daemon: ``neuron-emulator up --instance-type trn1.32xlarge`` on a socket of its own;
- the load: ``neuron-emulator run gpt3-6.7b --tp 8 --dp 3 --global-batch 48`` (24 rank processes
  on cores 0-23, replaying the traced step at the modelled pace), for the whole soak;
- processes coming and going: one after the other, ``neuron-emulator run mlp --steps 20`` on one
  of cores 24-31 (a real-math trainer that attaches, trains and releases its core), and every
  10 s ``neuron-ls -j`` (its output must parse and list 16 devices);
- ``neuron-exporter`` scraped ``--scrape-rate`` times a second (``/metrics``, HTTP 200 expected;
  every counter series must never decrease: the daemon is not restarted here);
- ``neuron-monitor`` (period 1 s; every report line must parse as JSON and carry no ``error``);
- ``neuron-top --interval 1`` in a tmux terminal (120x40).

Every ``--sample-every`` seconds it prints the RSS and open file descriptors of each long-running
component (daemon, exporter, monitor, neuron-top, and the job: launcher plus ranks, summed). At
the end: per component the growth of RSS and descriptors from the end of the warm-up to the end,
the scrape figures, counter monotonicity and every error. The warm-up is a fifth of the soak (at
least 2 minutes) and, when the soak is long enough, lasts until the daemon's latency window (10
minutes of executions, docs/snapshot.md) is full plus one minute: until then the daemon's memory
grows by design with the executions it keeps.
Targets (issue 10): RSS growth <= 5 % after warm-up, no descriptor growth, zero errors.
Prints figures; exits 0 whether or not the targets are met (it is a measurement), 1 if the soak
could not run.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from emulator.daemon.telemetry import LATENCY_WINDOW_S
from neurontools.contract.schema import APP_GROUPS, SYSTEM_GROUPS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from emulated_job import BIN, BenchError, Run, free_port, process_tree, run_benchmark, stop_process

MAIN_JOB = ["gpt3-6.7b", "--tp", "8", "--dp", "3", "--global-batch", "48"]
MAIN_RANKS = 24
CHURN_CORES = range(24, 32)
TERMINAL = ("120", "40")
# neuron-monitor: every group the tool has, for every Neuron process, once a second
MONITOR_CONFIG = {
    "period": "1s",
    "neuron_runtimes": [{"tag_filter": ".*", "metrics": [{"type": group} for group in APP_GROUPS]}],
    "system_metrics": [{"type": group} for group in SYSTEM_GROUPS],
}
COUNTER_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


@dataclass
class Errors:
    """Every error seen, by kind, with the first few messages."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, message: str) -> None:
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            examples = self.examples.setdefault(kind, [])
            if len(examples) < 3:
                examples.append(message[:300])

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass
class Scraper:
    """``/metrics`` at a fixed rate; latency, status and counter monotonicity."""

    port: int
    rate: float
    errors: Errors
    latencies: list[float] = field(default_factory=list)
    scrapes: int = 0
    counters_checked: int = 0
    decreases: int = 0
    _last: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        period = 1.0 / self.rate
        next_at = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                conn.request("GET", "/metrics")
                response = conn.getresponse()
                body = response.read().decode("utf-8", "replace")
                self.latencies.append(time.monotonic() - t0)
                self.scrapes += 1
                if response.status != 200:
                    self.errors.add("scrape status", f"HTTP {response.status}: {body[:200]}")
                else:
                    self.check_counters(body)
            except (OSError, http.client.HTTPException) as exc:
                self.errors.add("scrape failed", repr(exc))
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            next_at += period
            self._stop.wait(max(0.0, next_at - time.monotonic()))
        conn.close()

    def check_counters(self, body: str) -> None:
        counters: set[str] = set()
        for line in body.splitlines():
            if line.startswith("# TYPE "):
                parts = line.split()
                if len(parts) >= 4 and parts[3] == "counter":
                    counters.add(parts[2])
                continue
            if not line or line.startswith("#"):
                continue
            match = COUNTER_SAMPLE.match(line)
            if match is None:
                continue
            name = match[1]
            family = name.removesuffix("_total").removesuffix("_created")
            if name.endswith("_created") or (name not in counters and family not in counters):
                continue
            try:
                value = float(match[3])
            except ValueError:
                self.errors.add("exposition", line[:200])
                continue
            key = name + (match[2] or "")
            previous = self._last.get(key)
            self.counters_checked += 1
            if previous is not None and value < previous:
                self.decreases += 1
                self.errors.add("counter decreased", f"{key}: {previous} -> {value}")
            self._last[key] = value

    def stop(self) -> None:
        self._stop.set()


@dataclass
class Churn:
    """Short-lived trainers on cores 24-31, one after the other, and neuron-ls every 10 s."""

    run: Run
    errors: Errors
    jobs_done: int = 0
    ls_done: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _current: subprocess.Popen | None = None

    def trainers(self) -> None:
        index = 0
        while not self._stop.is_set():
            core = CHURN_CORES[index % len(CHURN_CORES)]
            index += 1
            argv = [str(BIN / "neuron-emulator"), "run", "mlp", "--cores", str(core), "--steps", "20"]
            proc = self.run.spawn(argv, "churn.log")
            self._current = proc
            while proc.poll() is None and not self._stop.is_set():
                time.sleep(0.2)
            if self._stop.is_set():
                stop_process(proc)
                return
            if proc.returncode != 0:
                self.errors.add("churn trainer", f"mlp on core {core} exited {proc.returncode}")
            else:
                self.jobs_done += 1
            self._stop.wait(2.0)

    def listings(self) -> None:
        while not self._stop.wait(10.0):
            result = subprocess.run(
                [str(BIN / "neuron-ls"), "-j"], env=self.run.env(), capture_output=True, text=True, timeout=30
            )
            if result.returncode != 0:
                self.errors.add("neuron-ls", result.stderr.strip()[:200])
                continue
            try:
                devices = json.loads(result.stdout)
            except ValueError as exc:
                self.errors.add("neuron-ls", f"not JSON: {exc}")
                continue
            if len(devices) != 16:
                self.errors.add("neuron-ls", f"{len(devices)} devices listed, not 16")
            self.ls_done += 1

    def stop(self) -> None:
        self._stop.set()
        if self._current is not None:
            stop_process(self._current)


@dataclass
class MonitorReader:
    """neuron-monitor's stdout: every line a JSON report without errors."""

    errors: Errors
    reports: int = 0

    def read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            try:
                report = json.loads(line)
            except ValueError:
                self.errors.add("neuron-monitor output", line[:200])
                continue
            self.reports += 1
            for path, message in report_errors(report):
                self.errors.add("neuron-monitor report error", f"{path}: {message}")


def report_errors(value: object, path: str = "") -> list[tuple[str, str]]:
    """Non-empty ``error`` fields anywhere in a report."""
    found: list[tuple[str, str]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "error" and item:
                found.append((path, str(item)))
            else:
                found += report_errors(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += report_errors(item, f"{path}[{i}]")
    return found


@dataclass
class Sample:
    at: float  # seconds since the soak started
    rss: dict[str, int]
    fds: dict[str, int]


def measure(components: dict[str, list[psutil.Process]]) -> tuple[dict[str, int], dict[str, int]]:
    rss: dict[str, int] = {}
    fds: dict[str, int] = {}
    for name, procs in components.items():
        rss[name] = fds[name] = 0
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                rss[name] += proc.memory_info().rss
                fds[name] += proc.num_fds()
    return rss, fds


def tmux_pane_pid(session: str) -> int:
    out = subprocess.run(
        ["tmux", "list-panes", "-t", session, "-F", "#{pane_pid}"], capture_output=True, text=True, check=True
    ).stdout
    return int(out.split()[0])


def wait_for_ranks(run: Run, count: int, launcher: subprocess.Popen, timeout: float = 300.0) -> None:
    assert run.client is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if launcher.poll() is not None:
            raise BenchError(f"the main job exited {launcher.returncode} before its ranks attached")
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            runtimes = [p for p in run.client.get("/processes") if p.get("kind") == "runtime"]
            if len(runtimes) >= count:
                return
        time.sleep(0.5)
    raise BenchError(f"the main job's {count} ranks did not attach within {timeout:g} s")


def soak(minutes: float, scrape_rate: float, sample_every: float) -> int:
    if shutil.which("tmux") is None:
        print("soak: needs tmux (apt-get install -y tmux)", file=sys.stderr)
        return 1
    return run_benchmark("soak", "nt-soak-", lambda run: soak_on(run, minutes, scrape_rate, sample_every))


def soak_on(run: Run, minutes: float, scrape_rate: float, sample_every: float) -> None:
    errors = Errors()
    tmux_session = f"nt-soak-{time.monotonic_ns()}"
    threads: list[threading.Thread] = []
    scraper: Scraper | None = None
    churn: Churn | None = None
    try:
        run.start_daemon()
        print(f"soak: {minutes:g} min on an emulated trn1.32xlarge; logs in {run.tmp}", flush=True)
        launcher = run.spawn([str(BIN / "neuron-emulator"), "run", *MAIN_JOB, "--steps", "1000000"], "main-job.log")
        run.peers.append(launcher)
        wait_for_ranks(run, MAIN_RANKS, launcher)
        print(f"soak: the main job's {MAIN_RANKS} ranks are attached", flush=True)

        port = free_port()
        exporter = run.spawn([str(BIN / "neuron-exporter"), "--port", str(port)], "exporter.log")
        run.peers.append(exporter)
        config = Path(tempfile.mkstemp(dir=run.tmp, suffix=".json")[1])
        config.write_text(json.dumps(MONITOR_CONFIG))
        monitor = run.spawn(
            [str(BIN / "neuron-monitor"), "-c", str(config)], "monitor.log", stdout=subprocess.PIPE, text=True
        )
        run.peers.append(monitor)
        reader = MonitorReader(errors)
        threads.append(threading.Thread(target=reader.read, args=(monitor.stdout,), daemon=True))
        command = f"PATH={BIN}:$PATH NEURON_EMULATOR_ADDR={run.address} exec {BIN / 'neuron-top'} --interval 1"
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", tmux_session, "-x", TERMINAL[0], "-y", TERMINAL[1], command],
            check=True,
        )
        top = psutil.Process(tmux_pane_pid(tmux_session))
        time.sleep(3)  # the exporter's first collection

        scraper = Scraper(port, scrape_rate, errors)
        churn = Churn(run, errors)
        threads += [
            threading.Thread(target=scraper.run, daemon=True),
            threading.Thread(target=churn.trainers, daemon=True),
            threading.Thread(target=churn.listings, daemon=True),
        ]
        for thread in threads:
            thread.start()

        components = {
            "daemon": [psutil.Process(run.daemon.pid)] if run.daemon is not None else [],
            "exporter": [psutil.Process(exporter.pid)],
            "monitor": [psutil.Process(monitor.pid)],
            "neuron-top": [top],
        }
        start = time.monotonic()
        warmup = warmup_seconds(minutes * 60)
        end = start + minutes * 60
        samples: list[Sample] = []
        print(f"{'t (s)':>7}  " + "  ".join(f"{n + ' RSS MiB':>18} {'fds':>4}" for n in [*components, "job"]))
        while True:
            components["job"] = process_tree([launcher.pid])
            if launcher.poll() is not None:
                errors.add("main job", f"exited {launcher.returncode}")
                break
            if exporter.poll() is not None or monitor.poll() is not None:
                errors.add("component exited", f"exporter {exporter.poll()}, monitor {monitor.poll()}")
                break
            rss, fds = measure(components)
            at = time.monotonic() - start
            samples.append(Sample(at, rss, fds))
            row = "  ".join(f"{rss[n] / 2**20:18.1f} {fds[n]:4d}" for n in components)
            print(f"{at:7.0f}  {row}   errors {errors.total}", flush=True)
            if time.monotonic() >= end:
                break
            time.sleep(max(0.0, min(sample_every, end - time.monotonic())))
        summarize(samples, warmup, scraper, churn, reader, errors, minutes)
    finally:
        if scraper is not None:
            scraper.stop()
        if churn is not None:
            churn.stop()
        subprocess.run(["tmux", "kill-session", "-t", tmux_session], capture_output=True)


def warmup_seconds(soak: float) -> float:
    """The end of the warm-up: a fifth of the soak (at least 2 min), and, when at least half of the
    soak would remain, not before the daemon's bounded latency window has filled (plus a minute)."""
    fifth = max(120.0, soak / 5)
    full = LATENCY_WINDOW_S + 60.0
    return max(fifth, full) if full <= soak / 2 else fifth


def summarize(
    samples: list[Sample],
    warmup: float,
    scraper: Scraper,
    churn: Churn,
    reader: MonitorReader,
    errors: Errors,
    minutes: float,
) -> None:
    after = [s for s in samples if s.at >= warmup]
    print()
    if len(after) < 2:
        print(f"soak: too short to compare after the warm-up ({warmup:.0f} s); run longer (--minutes)")
    else:
        first, last = after[0], after[-1]
        print(f"from the end of the warm-up ({first.at:.0f} s) to the end ({last.at:.0f} s):")
        print(f"  {'component':<12} {'RSS MiB':>17} {'growth':>8} {'fds':>11}   target: RSS <= +5 %, fds +0")
        for name in first.rss:
            a, b = first.rss[name], last.rss[name]
            growth = (b - a) / a * 100 if a else 0.0
            fa, fb = first.fds[name], last.fds[name]
            print(f"  {name:<12} {a / 2**20:8.1f}->{b / 2**20:8.1f} {growth:+7.1f}% {fa:5d}->{fb:<5d}")
    lat = sorted(scraper.latencies)
    if lat:
        p50, p99 = statistics.median(lat), lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        print(
            f"scrapes: {scraper.scrapes} in {minutes:g} min ({scraper.scrapes / (minutes * 60):.1f}/s), "
            f"p50 {p50 * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms"
        )
    print(f"counter samples checked: {scraper.counters_checked}, decreases: {scraper.decreases}")
    print(f"neuron-monitor reports: {reader.reports}; churn trainers finished: {churn.jobs_done}; "
          f"neuron-ls -j runs: {churn.ls_done}")  # fmt: skip
    print(f"errors: {errors.total}")
    for kind, count in sorted(errors.counts.items()):
        print(f"  {kind}: {count}  e.g. {errors.examples[kind][0]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the soak (default 30)")
    parser.add_argument("--scrape-rate", type=float, default=10.0, help="exporter scrapes per second (default 10)")
    parser.add_argument("--sample-every", type=float, default=30.0, help="seconds between RSS/fd samples (default 30)")
    args = parser.parse_args()
    if args.minutes <= 0 or args.scrape_rate <= 0 or args.sample_every <= 0:
        parser.error("--minutes, --scrape-rate and --sample-every must be positive")
    return soak(args.minutes, args.scrape_rate, args.sample_every)


if __name__ == "__main__":
    sys.exit(main())
