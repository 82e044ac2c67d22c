"""Does a full emulated trn1.32xlarge keep the modelled pace on this host, and at what cost?

    .venv/bin/python benchmarks/pace.py [--window 60] [--period 5] [--job KEY ...]

Two published Trn1 jobs in turn on one emulated trn1.32xlarge (a daemon on a temporary socket):

  BERT-Large Ph1 DP32   neuron-emulator run bert-large --dp 32 --micro-batch 16 --global-batch 16384 --seq-len 128
  GPT3-6.7B TP8xDP4     neuron-emulator run gpt3-6.7b --tp 8 --dp 4 --global-batch 64

For each job:

* modelled figures: ``neuron-emulator bench MODEL <same flags> --json`` (utilization of each core's
  time, step time), run before the job, not during it;
* start-up: from starting the command until all 32 ranks are attached (the daemon's attach stamps)
  and until the daemon has counted the job's first execution (polled every 0.25 s). A fresh
  compile cache in the temporary directory, so this includes the simulated compile wait before
  step 1, which the launcher's header states and the table repeats;
* a steady window: the real ``neuron-monitor`` runs with a config of period ``--period`` seconds
  (neuroncore_counters only) and its NDJSON is parsed as it arrives. The window is a run of
  consecutive reports whose periods lie between the end of step 1 and the end of the last step
  (step ends as the launcher prints them), at least ``--window`` seconds, and of the lengths
  possible the one closest to a whole number of steps, so that where the window cuts a step
  matters least. Measured utilization = each core's busy share over the window (the reports'
  utilization weighted by their period); the table gives the mean and the minimum over the 32
  cores. At every report the script also samples, from /proc via psutil, the CPU time (user +
  system) and RSS of the daemon, the launcher and each rank, of neuron-monitor, of itself and of
  every other process on the host, so the window's CPU deltas and the host's other load come
  from the same instants as the utilization;
* the job's step count is chosen so the steady part is long enough: BERT's ~5.7 s steps at the
  published global batch 16384 (no smaller batch needed), GPT3's ~8.9 s steps.

Targets, checked in the same run: the emulator (daemon + launcher + 32 ranks) uses at most 100 %
of one core; each core's measured utilization is within 2 points of the modelled one (mean and
minimum over the cores). Prints figures; asserts nothing. Everything it starts (daemon, jobs,
monitors) is stopped and the temporary directory removed at the end, also on Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from emulated_job import (
    BIN,
    CORES,
    INSTANCE_TYPE,
    JOBS,
    BenchError,
    Job,
    JobRun,
    Run,
    benchmark_parser,
    cpu_seconds,
    is_rank,
    missing_tools,
    process_tree,
    run_benchmark,
    stop_process,
)

CPU_TARGET = 100.0  # % of one core, the emulator's processes together
UTILIZATION_TARGET = 2.0  # percentage points from the modelled utilization
EDGE_MARGIN = 1.0  # seconds kept clear of step 1's end and the last step's end
MIB = 2**20
CPUS = psutil.cpu_count() or 1


# -- samples taken at every neuron-monitor report --------------------------------------------------


@dataclass
class Sample:
    t: float  # time.monotonic()
    cpu: dict[str, float]  # CPU seconds: daemon, launcher, ranks, monitor, self
    rss: dict[str, int]  # bytes: daemon, launcher, ranks
    rank_rss: list[int]
    rank_pids: frozenset[int]
    host_busy: float  # CPU seconds of the whole host (all vCPUs) not idle, iowait or steal
    others: dict[int, tuple[str, float]]  # every other process: pid -> (name, CPU seconds)
    loadavg: tuple[float, float, float]


class Sampler:
    """CPU and memory of the emulator's processes, the monitor, this script and everything else."""

    def __init__(self, run: Run, monitor: subprocess.Popen) -> None:
        self.run = run
        self.monitor = monitor
        self.me = psutil.Process()

    def __call__(self) -> Sample:
        daemon = self.run.daemon_processes()
        job = self.run.job
        tree = job.processes() if job is not None else []
        ranks = [p for p in tree if is_rank(p)]
        launcher = [p for p in tree if not is_rank(p)]
        monitor = process_tree([self.monitor.pid])
        rank_rss: list[int] = []
        for proc in ranks:
            with contextlib.suppress(psutil.Error):
                rank_rss.append(proc.memory_info().rss)
        rss = {"daemon": 0, "launcher": 0}
        for name, group in (("daemon", daemon), ("launcher", launcher)):
            for proc in group:
                with contextlib.suppress(psutil.Error):
                    rss[name] += proc.memory_info().rss
        rss["ranks"] = sum(rank_rss)
        cpu = {
            "daemon": cpu_seconds(daemon),
            "launcher": cpu_seconds(launcher),
            "ranks": cpu_seconds(ranks),
            "monitor": cpu_seconds(monitor),
            "self": cpu_seconds([self.me]),
        }
        known = {p.pid for p in [*daemon, *tree, *monitor, self.me]}
        others: dict[int, tuple[str, float]] = {}
        for proc in psutil.process_iter(["name", "cpu_times"]):
            if proc.pid in known or proc.info["cpu_times"] is None:
                continue
            times = proc.info["cpu_times"]
            others[proc.pid] = (proc.info["name"] or "?", times.user + times.system)
        host = psutil.cpu_times()
        busy = host.user + host.nice + host.system + getattr(host, "irq", 0.0) + getattr(host, "softirq", 0.0)
        return Sample(
            time.monotonic(),
            cpu,
            rss,
            rank_rss,
            frozenset(p.pid for p in ranks),
            busy,
            others,
            os.getloadavg(),
        )


@dataclass
class Report:
    t: float  # when the line arrived (time.monotonic())
    period: float  # seconds the report covers (its neuroncore_counters period)
    utilization: dict[int, float]  # core -> percent
    sample: Sample


@dataclass
class MonitorReader:
    """Reads neuron-monitor's NDJSON as it arrives; samples the host at every report."""

    sampler: Sampler
    period: float
    reports: list[Report] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def read(self, stream: IO[str]) -> None:
        for line in stream:
            t = time.monotonic()
            try:
                report = json.loads(line)
            except json.JSONDecodeError as exc:
                self.errors.append(f"not JSON: {exc}")
                continue
            utilization: dict[int, float] = {}
            period = self.period
            for runtime in report.get("neuron_runtime_data") or []:
                counters = (runtime.get("report") or {}).get("neuroncore_counters") or {}
                with contextlib.suppress(TypeError, ValueError):
                    period = float(counters.get("period", period))
                for core, values in (counters.get("neuroncores_in_use") or {}).items():
                    utilization[int(core)] = float(values["neuroncore_utilization"])
            self.reports.append(Report(t, period, utilization, self.sampler()))


# -- one job ---------------------------------------------------------------------------------------


@dataclass
class Modelled:
    utilization: float  # percent
    step_seconds: float
    seq_per_s: float
    mfu: float
    layout: str


@dataclass
class Measured:
    job: Job
    modelled: Modelled
    steps: int
    attached: float
    first_execution: float
    planned: float  # seconds from the command's start until the launcher's plan was ready
    trace_seconds: float
    compile_seconds: float
    window: float  # seconds between the window's boundary samples
    reports: int
    window_steps: float  # window length in modelled steps
    core_utilization: dict[int, float]  # percent over the window
    lowest_report: float  # lowest single (core, report) utilization in the window
    highest_report: float  # highest; neuron-monitor clips a period's utilization at 100 %
    cpu: dict[str, float]  # percent of one core over the window
    rss: dict[str, int]  # at the window's end
    rank_rss: list[int]
    ranks: int
    host_busy: float  # percent of one core, whole host
    others: list[tuple[str, int, float]]  # (name, pid, percent of one core), busiest first
    loadavg: tuple[float, float, float]
    notes: list[str] = field(default_factory=list)

    @property
    def mean(self) -> float:
        return sum(self.core_utilization.values()) / len(self.core_utilization)

    @property
    def lowest(self) -> float:
        return min(self.core_utilization.values())

    @property
    def emulator_cpu(self) -> float:
        return self.cpu["daemon"] + self.cpu["launcher"] + self.cpu["ranks"]

    @property
    def other_load(self) -> float:
        """The host's busy CPU that was not the emulator, the monitor or this script (also counts
        processes that came and went within the window, which ``others`` cannot see)."""
        return max(0.0, self.host_busy - sum(self.cpu.values()))


def modelled(run: Run, job: Job) -> Modelled:
    """``neuron-emulator bench MODEL <flags> --json``: the plan's figures for the job."""
    proc = subprocess.run(job.bench_argv(), env=run.env(), capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise BenchError(f"neuron-emulator bench {job.model} failed: {proc.stderr.strip()[-500:]}")
    row: dict[str, Any] = json.loads(proc.stdout)[0]
    if len(row["utilization"]) != 1:
        raise BenchError(f"{job.title}: expected one pipeline stage, got {len(row['utilization'])}")
    return Modelled(
        100.0 * float(next(iter(row["utilization"].values()))),
        float(row["step_seconds"]),
        float(row["emulated_seq_per_s"]),
        float(row["mfu"]),
        str(row["layout"]),
    )


def steps_for(window: float, period: float, step: float) -> int:
    """Steps so that after step 1 there is room for the window, a period of phase either side
    and a few steps more of window lengths to choose from (BERT: 18 x 5.65 s, GPT3: 13 x 8.90 s)."""
    return math.ceil((window + 3 * period) / step) + 4


def choose_window(reports: list[Report], first: int, last: int, window: float, step: float) -> tuple[int, int]:
    """Of the reports ``first..last`` (inclusive, all inside the steady part), a run of ``n``
    consecutive ones, at least ``window`` seconds, whose length is closest (relative to its
    length) to a whole number of steps. Returns (index of its first report, n)."""
    available = last - first + 1
    best: tuple[float, int] | None = None
    for n in range(1, available + 1):
        length = sum(r.period for r in reports[first : first + n])
        if length < window and n < available:
            continue
        steps = length / step
        score = abs(steps - round(steps)) * step / length
        if best is None or score < best[0] - 1e-9 or (abs(score - best[0]) <= 1e-9 and n > best[1]):
            best = (score, n)
    assert best is not None
    return first, best[1]


def measure_job(run: Run, job: Job, window: float, period: int) -> Measured:
    print(f"\n{job.title}: modelling ({' '.join(['neuron-emulator bench', job.model, *job.flags, '--json'])}) ...")
    model = modelled(run, job)
    steps = steps_for(window, period, model.step_seconds)
    print(
        f"  modelled: {model.layout}; step {model.step_seconds:.2f} s, utilization {model.utilization:.1f} %, "
        f"{model.seq_per_s:,.1f} seq/s, MFU {100 * model.mfu:.1f} %"
    )

    config = run.tmp / f"monitor-{job.key}.json"
    config.write_text(
        json.dumps(
            {
                "period": f"{period}s",
                "neuron_runtimes": [{"tag_filter": ".*", "metrics": [{"type": "neuroncore_counters"}]}],
                "system_metrics": [],
            }
        )
    )
    monitor = run.spawn(
        [str(BIN / "neuron-monitor"), "-c", str(config)],
        f"neuron-monitor-{job.key}.stderr.log",
        stdout=subprocess.PIPE,
        text=True,
    )
    run.peers.append(monitor)
    reader = MonitorReader(Sampler(run, monitor), float(period))
    assert monitor.stdout is not None
    thread = threading.Thread(target=reader.read, args=(monitor.stdout,), daemon=True)
    thread.start()
    try:
        print(f"  running: {job.command} --steps {steps} (fresh compile cache) ...", flush=True)
        job_run = run.start_job(job, steps, cache=f"compile-cache-{job.key}")
        run.wait_started(job_run)
        assert job_run.attached is not None and job_run.first_execution is not None
        traced = job_run.traced() or (0, float("nan"), float("nan"))
        print(
            f"  {CORES} ranks attached {job_run.attached:.1f} s after the command started (tracing "
            f"{traced[1]:.1f} s), first execution counted at {job_run.first_execution:.1f} s "
            f"({traced[2]:.1f} s of it the simulated compile wait)",
            flush=True,
        )
        budget = traced[2] + steps * model.step_seconds * 1.5 + 120
        code = run.wait_job(job_run, budget)
        if code != 0:
            raise BenchError(f"{job.command} exited with status {code}")
        time.sleep(0.5)  # the monitor's report after the job's end is not needed; let it settle
    finally:
        stop_process(monitor)
        run.peers.remove(monitor)
        thread.join(timeout=5)
        if monitor.stdout is not None:
            monitor.stdout.close()
    return evaluate(job, model, job_run, reader, window)


def evaluate(job: Job, model: Modelled, job_run: JobRun, reader: MonitorReader, window: float) -> Measured:
    ends = job_run.step_ends()
    steps = job_run.steps
    if 1 not in ends or steps not in ends:
        raise BenchError(f"{job.title}: the launcher did not print the end of steps 1 and {steps}")
    steady_start, steady_end = ends[1] + EDGE_MARGIN, ends[steps] - EDGE_MARGIN
    reports = reader.reports
    inside = [
        i
        for i, r in enumerate(reports)
        if i > 0 and r.t - r.period >= steady_start and r.t <= steady_end and len(r.utilization) == CORES
    ]
    if not inside:
        raise BenchError(f"{job.title}: no neuron-monitor report with all {CORES} cores inside the steady part")
    first, last = inside[0], inside[-1]
    if inside != list(range(first, last + 1)):
        raise BenchError(f"{job.title}: the steady reports are not consecutive ({inside})")
    notes: list[str] = []
    start, n = choose_window(reports, first, last, window, model.step_seconds)
    chosen = reports[start : start + n]
    before, after = reports[start - 1].sample, chosen[-1].sample
    seconds = after.t - before.t
    if seconds < window:
        notes.append(f"the steady part held only {seconds:.0f} s of whole reports (wanted {window:g} s)")
    if before.rank_pids != after.rank_pids or len(after.rank_pids) != CORES:
        notes.append(f"rank processes changed during the window ({len(before.rank_pids)} -> {len(after.rank_pids)})")
    weight = sum(r.period for r in chosen)
    cores = sorted(chosen[0].utilization)
    per_core = {c: sum(r.utilization[c] * r.period for r in chosen) / weight for c in cores}
    lowest_report = min(min(r.utilization.values()) for r in chosen)
    highest_report = max(max(r.utilization.values()) for r in chosen)
    cpu = {k: 100.0 * (after.cpu[k] - before.cpu[k]) / seconds for k in after.cpu}
    others = [
        (name, pid, 100.0 * (cpu_end - before.others[pid][1]) / seconds)
        for pid, (name, cpu_end) in after.others.items()
        if pid in before.others and cpu_end > before.others[pid][1]
    ]
    others.sort(key=lambda o: -o[2])
    traced = job_run.traced() or (0, float("nan"), float("nan"))
    return Measured(
        job=job,
        modelled=model,
        steps=steps,
        attached=job_run.attached or float("nan"),
        first_execution=job_run.first_execution or float("nan"),
        planned=job_run.traced_at() or float("nan"),
        trace_seconds=traced[1],
        compile_seconds=traced[2],
        window=seconds,
        reports=n,
        window_steps=weight / model.step_seconds,
        core_utilization=per_core,
        lowest_report=lowest_report,
        highest_report=highest_report,
        cpu=cpu,
        rss=after.rss,
        rank_rss=after.rank_rss,
        ranks=len(after.rank_pids),
        host_busy=100.0 * (after.host_busy - before.host_busy) / seconds,
        others=others,
        loadavg=after.loadavg,
        notes=notes,
    )


# -- report ----------------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def per_rank(values: list[int]) -> str:
    if not values:
        return "n/a"
    return f"{sum(values) / len(values) / MIB:.1f} ({min(values) / MIB:.1f}-{max(values) / MIB:.1f}) MiB"


def print_table(results: list[Measured], period: int) -> None:
    label_width = 44
    col = 24
    print(f"\n{'':<{label_width}}" + "".join(f"{m.job.title:>{col}}" for m in results) + "   target")

    def row(label: str, cells: list[str], target: str = "") -> None:
        print(f"{label:<{label_width}}" + "".join(f"{c:>{col}}" for c in cells) + (f"   {target}" if target else ""))

    row("steps run x modelled step", [f"{m.steps} x {m.modelled.step_seconds:.2f} s" for m in results])
    row("start-up: command -> 32 ranks attached", [f"{m.attached:.1f} s" for m in results])
    row("  launcher's plan ready (imports, tracing)", [f"{m.planned:.1f} s" for m in results])
    row("    of which tracing (launcher's figure)", [f"{m.trace_seconds:.1f} s" for m in results])
    row("  plan ready -> 32 ranks attached", [f"{m.attached - m.planned:.1f} s" for m in results])
    row("start-up: command -> first execution counted", [f"{m.first_execution:.1f} s" for m in results])
    row("  of which simulated compile (fresh cache)", [f"{m.compile_seconds:.1f} s" for m in results])
    row(
        "steady window (neuron-monitor reports)",
        [f"{m.window:.1f} s, {m.reports} x {period} s" for m in results],
    )
    row("  = modelled steps", [f"{m.window_steps:.2f}" for m in results])
    row("NC utilization, modelled (bench --json)", [f"{m.modelled.utilization:.1f} %" for m in results])
    row("NC utilization, neuron-monitor, mean of 32", [f"{m.mean:.1f} %" for m in results])
    row("NC utilization, neuron-monitor, lowest core", [f"{m.lowest:.1f} %" for m in results])
    row("NC utilization, highest core", [f"{max(m.core_utilization.values()):.1f} %" for m in results])
    row("  lowest single core in a single report", [f"{m.lowest_report:.1f} %" for m in results])
    row("  highest single core in a single report", [f"{m.highest_report:.1f} %" for m in results])
    ok_mean = [abs(m.mean - m.modelled.utilization) <= UTILIZATION_TARGET for m in results]
    ok_low = [abs(m.lowest - m.modelled.utilization) <= UTILIZATION_TARGET for m in results]
    row(
        "  mean - modelled",
        [f"{m.mean - m.modelled.utilization:+.2f} pt {verdict(ok)}" for m, ok in zip(results, ok_mean, strict=True)],
        f"within {UTILIZATION_TARGET:g} pt",
    )
    row(
        "  lowest core - modelled",
        [f"{m.lowest - m.modelled.utilization:+.2f} pt {verdict(ok)}" for m, ok in zip(results, ok_low, strict=True)],
        f"within {UTILIZATION_TARGET:g} pt",
    )
    ok_cpu = [m.emulator_cpu <= CPU_TARGET for m in results]
    row(
        "emulator CPU, % of one core",
        [f"{m.emulator_cpu:.1f} % {verdict(ok)}" for m, ok in zip(results, ok_cpu, strict=True)],
        f"<= {CPU_TARGET:g} %",
    )
    row("  daemon", [f"{m.cpu['daemon']:.2f} %" for m in results])
    row("  launcher (neuron-emulator run)", [f"{m.cpu['launcher']:.2f} %" for m in results])
    row("  32 ranks together", [f"{m.cpu['ranks']:.2f} %" for m in results])
    row("emulator RSS, total", [f"{(sum(m.rss.values())) / MIB:,.0f} MiB" for m in results])
    row("  daemon", [f"{m.rss['daemon'] / MIB:,.0f} MiB" for m in results])
    row("  launcher", [f"{m.rss['launcher'] / MIB:,.0f} MiB" for m in results])
    row("  per rank: mean (min-max)", [per_rank(m.rank_rss) for m in results])
    row("neuron-monitor CPU (the measuring tool)", [f"{m.cpu['monitor']:.2f} %" for m in results])
    row("this script's CPU (sampling /proc)", [f"{m.cpu['self']:.2f} %" for m in results])
    row("host: all CPU busy, % of one core", [f"{m.host_busy:.0f} % of {100 * CPUS}" for m in results])
    row("  of which not this run's processes", [f"{m.other_load:.0f} %" for m in results])
    row("  load average 1/5/15 min at window end", ["/".join(f"{x:.1f}" for x in m.loadavg) for m in results])

    print("\nNotes")
    print(
        "  utilization: each core's busy share over the window, from neuron-monitor's neuroncore_counters (period "
        f"{period} s), weighted by period; the modelled value is the plan's busy share of a steady step"
    )
    print("  a single report dips when a step's executions reach the daemon late (host busy): their elapsed")
    print("       busy time is credited on arrival, so the next report makes up for it unless it is clipped at 100 %")
    print("  CPU: user + system time deltas over the window (/proc via psutil) as % of one core; the daemon's")
    print("       share includes serving neuron-monitor's snapshot every period")
    print("  RSS: resident set at the window's end; the sum counts shared pages (interpreter, libraries) per process")
    for m in results:
        busiest = ", ".join(f"{name} [{pid}] {pct:.0f} %" for name, pid, pct in m.others[:5]) or "none"
        print(f"  {m.job.title}: busiest other processes alive through the window: {busiest}")
        for note in m.notes:
            print(f"  {m.job.title}: {note}")
    met = all(ok_mean) and all(ok_low) and all(ok_cpu)
    print(
        f"\ntargets: {'all met' if met else 'NOT all met'} "
        f"(emulator CPU <= {CPU_TARGET:g} % of one core; utilization within {UTILIZATION_TARGET:g} pt of modelled)"
    )


# -- main ------------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--window", type=float, default=60.0, help="steady window, seconds (default 60)")
    parser.add_argument("--period", type=int, default=5, help="neuron-monitor period, whole seconds (default 5)")
    parser.add_argument(
        "--job",
        action="append",
        choices=list(JOBS),
        help="run only this job (repeatable; default both, BERT first)",
    )
    args = parser.parse_args()
    if args.window < 10:
        parser.error("--window must be at least 10 s")
    if not 1 <= args.period <= 60:
        parser.error("--period must be 1-60 s")
    return args


def main() -> int:
    args = parse_args()
    if missing_tools("pace", "neuron-emulator", "neuron-monitor"):
        return 1
    jobs = [JOBS[k] for k in (args.job or list(JOBS))]
    results: list[Measured] = []

    def measure_jobs(run: Run) -> None:
        memory = psutil.virtual_memory()
        print(
            f"host: {CPUS} vCPUs, {memory.total / 2**30:.1f} GiB RAM ({memory.available / 2**30:.1f} available), "
            f"Python {platform.python_version()}, load average " + "/".join(f"{x:.1f}" for x in os.getloadavg())
        )
        run.start_daemon()
        print(f"emulated {INSTANCE_TYPE} at {run.address}; each job with its own fresh compile cache in {run.tmp}")
        for job in jobs:
            results.append(measure_job(run, job, args.window, args.period))

    return run_benchmark("pace", "nt-pace-", measure_jobs, lambda: print_table(results, args.period))


if __name__ == "__main__":
    sys.exit(main())
