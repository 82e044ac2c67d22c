"""A whole fleet at work on this host: N trn1.32xlarge nodes, every NeuronCore in one training job.

    .venv/bin/python benchmarks/fleet.py [--nodes 32] [--model gpt3-6.7b] [--tp 8] [--seconds 60]
                                         [--ranks-per-process 32]

Load: ``neuron-emulator cluster up --nodes N`` (exporters collecting every second), then
``neuron-emulator run MODEL --nodes N --tp T --ranks-per-process K`` filling every core of every
node, its graphs in the compile cache first (as ``neuron_parallel_compile`` leaves them). Once the
job's first step is reported on every node, over ``--seconds``:

  cores busy   NeuronCore busy share from the exporters (``rate(neuroncore_busy_seconds_total)``
               over the window, every core of every node), next to the plan's utilization
  CPU          user + system seconds of the emulator's processes (cluster host, launcher,
               replaying processes) as % of one core, and the same per emulated NeuronCore
  RSS          their resident memory, and per NeuronCore
  scrape       latency of GET /metrics on every node's exporter (median and worst over the nodes)
  collected    nodes whose exporter's last collection was under 2 s old at each of 5 scrapes 1 s
               apart (exporters collect every 1 s), the worst age seen, and the longest collection

Peer, in the same run: the same job on one node (``--nodes 1``, same per-node layout) measured the
same way; the target of issue 12 is the fleet at <= 1 core (100 %) for emulator and exporters.

Prints figures; asserts nothing. Everything it starts is stopped at the end, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))
from emulated_job import cpu_seconds, rss_bytes, stop_process

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def env(runtime: Path, **extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("NEURON_")}
    out.update(PYTHONPATH=str(ROOT), XDG_RUNTIME_DIR=str(runtime), **extra)
    return out


def tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def scrape(url: str) -> tuple[float, dict[str, float]]:
    """(seconds the GET took, {family sample key: value}) for the series this benchmark reads."""
    start = time.monotonic()
    with urllib.request.urlopen(url, timeout=30) as resp:
        text = resp.read().decode()
    took = time.monotonic() - start
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "neuroncore_busy_seconds_total":
                values[f"busy/{s.labels['neuroncore']}"] = s.value
            elif s.name == "neuron_exporter_last_collection_timestamp_seconds":
                values["last"] = s.value
            elif s.name == "neuron_exporter_collection_duration_seconds":
                values["duration"] = s.value
            elif s.name == "neuron_job_steps_total":
                values["steps"] = values.get("steps", 0.0) + s.value
    return took, values


@dataclass
class Figures:
    nodes: int
    cores: int
    busy: float
    cpu: float
    rss: int
    scrape_median: float
    scrape_worst: float
    reporting: int
    age_worst: float  # seconds since a node's exporter last collected, worst seen
    duration_worst: float  # longest collection seen
    processes: int
    plan_utilization: float


@contextlib.contextmanager
def cluster(runtime: Path, nodes: int) -> Iterator[dict]:
    up = subprocess.run(
        [str(BIN / "neuron-emulator"), "cluster", "up", "--nodes", str(nodes), "--detach"],
        env=env(runtime),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if up.returncode != 0:
        raise SystemExit(f"fleet.py: cluster up failed: {up.stderr.strip()}")
    try:
        status = subprocess.run(
            [str(BIN / "neuron-emulator"), "cluster", "status", "--json"],
            env=env(runtime),
            capture_output=True,
            text=True,
            timeout=120,
        )
        yield json.loads(status.stdout)
    finally:
        subprocess.run([str(BIN / "neuron-emulator"), "cluster", "down"], env=env(runtime), capture_output=True)


def measure(args: argparse.Namespace, nodes: int) -> Figures:
    runtime = Path(tempfile.mkdtemp(prefix="nt-fleet-", dir="/tmp"))
    job = None
    try:
        with cluster(runtime, nodes) as status:
            urls = [n["exporter_url"] for n in status["nodes"]]
            host = status["pid"]
            argv = [str(BIN / "neuron-emulator"), "run", args.model, "--nodes", str(nodes), "--tp", str(args.tp)]
            argv += ["--steps", "100000", "--ranks-per-process", str(args.ranks_per_process), *args.extra]
            cache = str(runtime / "compile-cache")
            warm = subprocess.run(
                [sys.executable, "-c", WARM, args.model, str(nodes), str(args.tp), *args.extra],
                env=env(runtime, NEURON_COMPILE_CACHE_URL=cache),
                capture_output=True,
                text=True,
            )
            if warm.returncode != 0:
                raise SystemExit(f"fleet.py: planning failed: {warm.stderr.strip()[-400:]}")
            plan_utilization = float(warm.stdout.strip() or 0)
            node0 = status["nodes"][0]["address"]  # what `run` uses for one node (no --nodes lookup)
            job = subprocess.Popen(
                argv,
                env=env(runtime, NEURON_COMPILE_CACHE_URL=cache, NEURON_EMULATOR_ADDR=node0),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                if job.poll() is not None:
                    raise SystemExit(f"fleet.py: the job ended: {job.stderr.read() if job.stderr else ''}")
                if all(scrape(u)[1].get("steps", 0) >= 1 for u in urls):
                    break
                time.sleep(2)
            procs = tree(host) + tree(job.pid)
            before = [scrape(u)[1] for u in urls]
            cpu0, t0 = cpu_seconds(procs), time.monotonic()
            time.sleep(args.seconds)
            cpu = (cpu_seconds(procs) - cpu0) / (time.monotonic() - t0)
            latencies, after = [], []
            for u in urls:
                took, values = scrape(u)
                latencies.append(took)
                after.append(values)
            elapsed = time.monotonic() - t0
            shares = [
                (a[k] - b.get(k, 0.0)) / elapsed
                for a, b in zip(after, before, strict=True)
                for k in a
                if k.startswith("busy/")
            ]
            # every node reporting at 1 s: the age of each exporter's last collection, 5 rounds
            ages: dict[str, list[float]] = {u: [] for u in urls}
            durations = []
            for _ in range(5):
                for u in urls:
                    values = scrape(u)[1]
                    ages[u].append(time.time() - values.get("last", 0.0))
                    durations.append(values.get("duration", 0.0))
                time.sleep(1.0)
            return Figures(
                nodes=nodes,
                cores=len(shares),
                busy=statistics.mean(shares) if shares else 0.0,
                cpu=cpu * 100,
                rss=rss_bytes(procs),
                scrape_median=statistics.median(latencies),
                scrape_worst=max(latencies),
                reporting=sum(1 for seen in ages.values() if max(seen) < 2.0),
                age_worst=max(max(seen) for seen in ages.values()),
                duration_worst=max(durations),
                processes=len(procs),
                plan_utilization=plan_utilization,
            )
    finally:
        if job is not None:
            stop_process(job, timeout=30)
        shutil.rmtree(runtime, ignore_errors=True)


# Plans the job once in a child (as `run` will) to put its graphs into the compile cache and print
# the plan's mean utilization.
WARM = """
import os, sys
from emulator.hardware import get_instance_type
from emulator.parallel.launch import load_models
from emulator.parallel.runner import JobRequest, plan_request
model, nodes, tp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
kw = {"zero1": True if "--zero1" in sys.argv else None,  # absent: as the model's recipe, like the job
      "recompute": "full" if "--recompute" in sys.argv else None,
      "sequence_parallel": True if "--sequence-parallel" in sys.argv else None}
plan = plan_request(JobRequest(model, tp=tp, nodes=nodes, **kw), get_instance_type("trn1.32xlarge"))
load_models(plan, dict(os.environ))
print(sum(plan.utilization(s) for s in plan.stages) / len(plan.stages))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--model", default="gpt3-6.7b")
    parser.add_argument("--tp", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--ranks-per-process", type=int, default=32)
    args, extra = parser.parse_known_args()
    args.extra = extra  # more run flags (--zero1, --recompute, --sequence-parallel)
    print(f"fleet.py: {args.model} TP{args.tp} on trn1.32xlarge nodes, {args.ranks_per_process} ranks per process")
    rows = [measure(args, 1), measure(args, args.nodes)]
    print(
        f"{'nodes':>5} {'cores':>5} {'busy':>6} {'plan':>6} {'CPU %':>7} {'CPU/core':>9} {'RSS MiB':>8} "
        f"{'RSS/core':>9} {'procs':>5} {'scrape p50':>10} {'worst':>7} {'collected':>9} {'max age':>8} {'max dur':>8}"
    )
    for f in rows:
        print(
            f"{f.nodes:>5} {f.cores:>5} {f.busy * 100:>5.1f}% {f.plan_utilization * 100:>5.1f}% {f.cpu:>6.1f}% "
            f"{f.cpu / max(f.cores, 1):>8.3f}% {f.rss / 2**20:>8.0f} {f.rss / max(f.cores, 1) / 2**20:>8.2f}M "
            f"{f.processes:>5} {f.scrape_median * 1000:>8.1f}ms {f.scrape_worst * 1000:>5.0f}ms "
            f"{f.reporting:>4}/{f.nodes} {f.age_worst:>7.2f}s {f.duration_worst * 1000:>6.0f}ms"
        )
    fleet = rows[-1]
    verdict = "meets" if fleet.cpu <= 100 else "misses"
    print(f"target: the fleet's emulator and exporters at <= 100 % of one core: {fleet.cpu:.1f} % ({verdict} it)")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
