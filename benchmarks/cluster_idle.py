"""The cluster host's CPU and memory at rest, next to one node run the one-process-each way.

    .venv/bin/python benchmarks/cluster_idle.py [--nodes 32] [--seconds 30] [--scrape-interval 15]

Load: ``neuron-emulator cluster up --nodes N --detach`` (trn1.32xlarge nodes, exporters collecting
every second) in a temporary runtime directory, nothing attached. After a 5 s settle, the host
process's CPU (user + system seconds, psutil) over ``--seconds`` as % of one core, its RSS and
USS and thread count:

  idle      nobody scrapes the exporters
  scraped   every node's /metrics fetched every ``--scrape-interval`` s (Prometheus with the
            file_sd config of docs/cluster.md at its default interval), spread over the interval

Peer, in the same run: one node the 2N-process way — ``neuron-emulator up --instance-type
trn1.32xlarge`` and ``neuron-exporter --interval 1`` against it, two processes — measured idle over
the same window; multiplied by N it is what N such pairs would cost.

Prints figures; asserts nothing. Everything it starts and the temporary directory are removed at
the end, also on Ctrl-C and errors.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
SETTLE_S = 5.0


def env(runtime: Path, **extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("NEURON_")}
    out.update(PYTHONPATH=str(ROOT), XDG_RUNTIME_DIR=str(runtime), **extra)
    return out


def cpu_seconds(procs: list[psutil.Process]) -> float:
    return sum(t.user + t.system for t in (p.cpu_times() for p in procs))


def measure(procs: list[psutil.Process], seconds: float) -> tuple[float, int, int]:
    """CPU (% of one core) over ``seconds``; RSS and USS (bytes) at the end."""
    before, start = cpu_seconds(procs), time.monotonic()
    time.sleep(seconds)
    cpu = (cpu_seconds(procs) - before) / (time.monotonic() - start)
    rss = sum(p.memory_info().rss for p in procs)
    uss = sum(p.memory_full_info().uss for p in procs)
    return 100 * cpu, rss, uss


def scrape_all(urls: list[str], interval: float, stop: threading.Event) -> None:
    """Fetch every URL once per ``interval``, spread evenly over it (as Prometheus spreads targets)."""
    gap = interval / len(urls)
    while not stop.is_set():
        for url in urls:
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=10) as resp:
                resp.read()
            if stop.wait(gap):
                return


@contextlib.contextmanager
def cluster(nodes: int, runtime: Path) -> Iterator[tuple[dict, float]]:
    started = time.monotonic()
    up = subprocess.run(
        [sys.executable, "-m", "emulator.cli", "cluster", "up", "--nodes", str(nodes), "--detach"],
        env=env(runtime),
        capture_output=True,
        text=True,
    )
    took = time.monotonic() - started
    if up.returncode != 0:
        raise SystemExit(f"cluster up failed: {up.stderr.strip()}")
    try:
        status = subprocess.run(
            [sys.executable, "-m", "emulator.cli", "cluster", "status", "--json"],
            env=env(runtime),
            capture_output=True,
            text=True,
            check=True,
        )
        yield json.loads(status.stdout), took
    finally:
        subprocess.run([sys.executable, "-m", "emulator.cli", "cluster", "down"], env=env(runtime), capture_output=True)


@contextlib.contextmanager
def one_node_pair(runtime: Path) -> Iterator[list[psutil.Process]]:
    """A daemon and a neuron-exporter, each its own process (the 2N-process design, N = 1)."""
    sock = runtime / "single.sock"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "emulator.cli", "up", "-i", "trn1.32xlarge", "--socket", str(sock)],
                env=env(runtime),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "neurontools.exporter.cli", "--port", "0", "--interval", "1"],
                env=env(runtime, NEURON_EMULATOR_ADDR=str(sock)),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        yield [psutil.Process(p.pid) for p in procs]
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--scrape-interval", type=float, default=15.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # unwind (and clean up) on SIGTERM too
    runtime = Path(tempfile.mkdtemp(prefix="nt-clbench-", dir="/tmp"))
    try:
        with cluster(args.nodes, runtime) as (status, took):
            host = psutil.Process(status["pid"])
            print(f"cluster up --nodes {args.nodes} --detach: {took:.1f} s until every daemon and exporter answered")
            time.sleep(SETTLE_S)
            load = os.getloadavg()[0]
            cpu, rss, uss = measure([host], args.seconds)
            print(
                f"idle     host pid {host.pid}: {cpu:5.1f} % of one core over {args.seconds:g} s, "
                f"RSS {mib(rss)} (USS {mib(uss)}), {host.num_threads()} threads; load average {load:.2f}"
            )
            stop = threading.Event()
            urls = [n["exporter_url"] for n in status["nodes"]]
            scraper = threading.Thread(target=scrape_all, args=(urls, args.scrape_interval, stop), daemon=True)
            scraper.start()
            try:
                time.sleep(SETTLE_S)
                cpu, rss, uss = measure([host], args.seconds)
            finally:
                stop.set()
                scraper.join()
            print(
                f"scraped  every exporter every {args.scrape_interval:g} s: {cpu:5.1f} % of one core, "
                f"RSS {mib(rss)} (USS {mib(uss)})"
            )
        with one_node_pair(runtime) as pair:
            time.sleep(SETTLE_S)
            cpu, rss, uss = measure(pair, args.seconds)
            print(
                f"peer     one daemon + one neuron-exporter (2 processes), idle: {cpu:4.1f} % of one core, "
                f"RSS {mib(rss)} (USS {mib(uss)}); x {args.nodes} = {cpu * args.nodes:.0f} % of one core, "
                f"{mib(rss * args.nodes)}"
            )
    except KeyboardInterrupt:
        return 130
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
