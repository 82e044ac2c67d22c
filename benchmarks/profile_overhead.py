"""What profile capture (NEURON_RT_INSPECT_*) adds to a training step's host time.

    python benchmarks/profile_overhead.py [--steps 30] [--rounds 3]

1. gpt-tiny (real math, one process on one NeuronCore of an emulated trn1.32xlarge; the daemon,
   compile cache and capture directories are a temporary ``Run``'s: emulated_job.py). Each variant
   is one process training ``--steps`` steps: capture off; ``NEURON_RT_INSPECT_ENABLE=1`` (device
   profile ``model``, the default: the first execution of each graph, system trace of every one);
   the same with ``NEURON_RT_INSPECT_DEVICE_PROFILE=session`` (every execution). The variants
   alternate, ``--rounds`` times, so a change in the machine's load hits them alike. Per step:
   host time = the step's wall time minus the simulated device time the process waited for (what
   the framework and the emulated runtime spent on the host); the first two steps (each compiles
   or loads a graph) are left out; medians over all rounds. Target: capture / off <= 1.05 for
   both modes. Printed beside it: the wall time per step, the process's CPU time per step (user
   + system, from one step's end to the next), and the wall time spent inside the profiling glue
   per step (``emulator/profile/device.py``'s methods, timed in the process: the capture's own
   cost, whatever the machine's load). Math runs on one thread (``OMP_NUM_THREADS=1``), so that
   spinning OpenMP threads on a loaded machine do not swamp the CPU figures.
2. The 32-rank GPT3-6.7B TP8xDP4 replay job (``emulated_job.JOBS``) on all NeuronCores of the
   emulated trn1.32xlarge, three ways, each measured over ``--seconds`` once past step 1:
   (a) not profiled; (b) the same job, every rank asked by the daemon to profile about one
   window of steps (``POST /v1/processes/{pid}/profile``, what ``neuron-profile capture --pid``
   sends; every execution profiled); (c) a new job under ``NEURON_RT_INSPECT_ENABLE=1`` with
   ``NEURON_RT_INSPECT_DEVICE_PROFILE=session`` (every execution of every rank from step 1). For
   each: the job's modelled utilisation (the NeuronCores' mean busy share from the daemon's
   snapshots, the figure neuron-monitor reports), the CPU the emulator uses (daemon, launcher,
   32 ranks: psutil, share of one core) and the trace written. Targets (docs/profiling.md
   §Parallel jobs): utilisation within 2 points of (a), the emulator under one core.
3. ``neuron-profile view`` of 3 steps of all 32 ranks, captured at the daemon's request, the way
   a user does it (``view -d DIR --output-format F`` for summary-text, perfetto and chrome-json,
   one merged file each): seconds and output size each, target <= 30 s; for the job as
   ``neuron-emulator run gpt3-6.7b --tp 8 --dp 4`` runs it (global batch 4: one micro-step and
   the optimizer per step) and for part 2's job (global batch 64: 16 micro-steps per step, 16x
   the executions to lay out).

``--part tiny``, ``replay`` or ``view`` runs one part. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from emulated_job import CORES, JOBS, BenchError, Job, LoadMeter, Run, benchmark_parser, run_benchmark

TARGET = 1.05
WARMUP_STEPS = 2  # step 1 and 2 each compile (or load from the cache) a graph of their own
VARIANTS: dict[str, dict[str, str]] = {
    "off": {},
    "model": {"NEURON_RT_INSPECT_ENABLE": "1"},
    "session": {"NEURON_RT_INSPECT_ENABLE": "1", "NEURON_RT_INSPECT_DEVICE_PROFILE": "session"},
}
# (host, wall, CPU, in the profiling glue) seconds per step
results: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in VARIANTS}


class CpuPerStep:
    """A quiet progress reporter that notes, at each step's end, the process's CPU seconds and the
    wall seconds spent so far inside the profiling glue (``DeviceCapture``'s methods)."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, float]] = []
        self.in_profile = 0.0

    def start(self, header: object) -> None:
        self.marks = [(time.process_time(), self.in_profile)]

    def step(self, stats: object) -> None:
        self.marks.append((time.process_time(), self.in_profile))

    def finish(self, result: object) -> None:
        pass

    def close(self) -> None:
        pass

    def timing(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.in_profile += time.perf_counter() - t0

        return timed


def worker(steps: int) -> None:
    """One training process (``--worker``): gpt-tiny for ``steps`` steps, then one JSON line of
    each step's (wall seconds, simulated device seconds, process CPU seconds, seconds in the
    profiling glue)."""
    from emulator.profile.device import DeviceCapture
    from emulator.workloads import get_workload
    from emulator.workloads.runner import RunConfig, XlaBackend, train

    cpu = CpuPerStep()
    for name in ("executed", "step_ends", "compiled"):
        setattr(DeviceCapture, name, cpu.timing(getattr(DeviceCapture, name)))
    config = RunConfig.defaults(get_workload("gpt-tiny"), steps=steps)
    result = train(config, XlaBackend(), cpu)
    deltas = [(b[0] - a[0], b[1] - a[1]) for a, b in zip(cpu.marks, cpu.marks[1:], strict=False)]
    rows = [(s.wall_seconds, s.device_seconds or 0.0, *d) for s, d in zip(result.steps, deltas, strict=True)]
    print(json.dumps(rows))


def _one(run: Run, name: str, steps: int, round_: int) -> None:
    extra = {**VARIANTS[name], "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # no spinning math threads
    if name != "off":
        extra["NEURON_RT_INSPECT_OUTPUT_DIR"] = str(run.tmp / f"profile-{name}-{round_}")
    argv = [sys.executable, __file__, "--worker", "--steps", str(steps)]
    done = subprocess.run(argv, env=run.env(**extra), capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise BenchError(f"{name} run failed: {done.stderr.strip().splitlines()[-1:]}")
    steps_seen = json.loads(done.stdout.strip().splitlines()[-1])
    results[name] += [(wall - device, wall, cpu, glue) for wall, device, cpu, glue in steps_seen[WARMUP_STEPS:]]


def gpt_tiny(run: Run, steps: int, rounds: int) -> None:
    run.start_daemon()
    for round_ in range(rounds):
        for name in VARIANTS:
            _one(run, name, steps, round_)
            print(f"round {round_ + 1}/{rounds}: {name} done", file=sys.stderr)


@dataclass
class Row:
    name: str
    cores: int
    utilization: float
    cpu: float
    trace_bytes: int
    files: int


def _disk(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()] if path.exists() else []
    return sum(p.stat().st_size for p in files), len(files)


def _request_all(run: Run, out: Path, steps: int) -> list[int]:
    """Ask the daemon to profile ``steps`` steps of every rank process; their PIDs."""
    assert run.client is not None
    pids = [int(p["pid"]) for p in run.client.get("/processes") if p.get("kind") == "runtime"]
    for pid in pids:
        run.client.post(f"/processes/{pid}/profile", {"steps": steps, "output_dir": str(out)})
    return pids


def _wait_done(run: Run, pids: list[int], timeout: float) -> list[str]:
    """Until every request is done or failed; the errors."""
    assert run.client is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = [run.client.get(f"/processes/{pid}/profile") for pid in pids]
        if all(s["state"] in ("done", "failed") for s in states):
            return [f"{s['pid']}: {s['error']}" for s in states if s["state"] == "failed"]
        time.sleep(0.5)
    raise BenchError(f"the profile requests did not finish within {timeout:.0f} s")


REPLAY = JOBS["gpt3-6.7b-tp8dp4"]
replay_rows: list[Row] = []
replay_notes: list[str] = []
VIEW_STEPS = 3
VIEW_TARGET = 30.0  # seconds for `neuron-profile view` of 3 steps, all ranks
VIEW_FORMATS = {"summary-text": "summary.txt", "perfetto": "trace.pftrace", "chrome-json": "trace.pt.trace.json"}
VIEW_JOB = Job("gpt3-6.7b-tp8dp4-run", "GPT3-6.7B TP8xDP4 (run's defaults)", "gpt3-6.7b", ("--tp", "8", "--dp", "4"))
views: list[tuple[str, str, float, int]] = []  # job, format, seconds, output bytes


def _view_all(run: Run, job: str) -> None:
    """Capture 3 steps of every rank of the running job at the daemon's request and time
    `neuron-profile view` on them."""
    out = run.tmp / f"view-{len(views)}"
    errors = _wait_done(run, _request_all(run, out, VIEW_STEPS), timeout=600)
    replay_notes.extend(f"request failed: {e}" for e in errors)
    size, files = _disk(out)
    replay_notes.append(f"{job}: {VIEW_STEPS} steps of every rank captured, {size / 2**20:.1f} MiB in {files} files")
    tool = [str(Path(sys.executable).with_name("neuron-profile"))]  # the console script beside this Python
    for fmt, name in VIEW_FORMATS.items():
        target = out.with_name(out.name + "-" + name)
        began = time.monotonic()
        subprocess.run(
            [*tool, "view", "-d", str(out), "--output-format", fmt, "--output-file", str(target)],
            check=True,
            capture_output=True,
        )
        views.append((job, fmt, time.monotonic() - began, target.stat().st_size))
        target.unlink()


def view_jobs(run: Run) -> None:
    """Part 3 (module docstring)."""
    if run.daemon is None:
        run.start_daemon()
    for job in (VIEW_JOB, REPLAY):
        running = run.start_job(job, 100_000)
        run.wait_started(running)
        run.wait_step(running, 1, timeout=(running.traced() or (0, 0.0, 60.0))[2] + 120)
        _view_all(run, job.command)
        run.stop_job()


def _started(run: Run, extra_env: dict[str, str] | None = None) -> LoadMeter:
    running = run.start_job(REPLAY, 100_000, extra_env=extra_env)  # runs until stopped
    run.wait_started(running)
    run.wait_step(running, 1, timeout=(running.traced() or (0, 0.0, 60.0))[2] + 120)
    return LoadMeter(run, running)


def replay_job(run: Run, seconds: float) -> None:
    """Part 2 (module docstring): the 32-rank replay job not profiled, at the daemon's request,
    under the runtime's variables."""
    if run.daemon is None:
        run.start_daemon()
    meter = _started(run)
    time.sleep(seconds)
    busy, cpu = meter.stop()
    replay_rows.append(Row("not profiled", busy.cores, busy.utilization, cpu, 0, 0))
    assert run.job is not None
    steps = max(1, round(seconds / (run.job.step_seconds() or 10.0)))
    out = run.tmp / "capture-pid"
    meter = LoadMeter(run, run.job)
    errors = _wait_done(run, _request_all(run, out, steps), timeout=seconds * 3 + 60)
    busy, cpu = meter.stop()
    replay_rows.append(Row(f"capture --pid, {steps} steps", busy.cores, busy.utilization, cpu, *_disk(out)))
    replay_notes.extend(f"request failed: {e}" for e in errors)
    run.stop_job()
    out = run.tmp / "inspect"
    env = {
        "NEURON_RT_INSPECT_ENABLE": "1",
        "NEURON_RT_INSPECT_OUTPUT_DIR": str(out),
        "NEURON_RT_INSPECT_DEVICE_PROFILE": "session",
    }
    meter = _started(run, env)
    time.sleep(seconds)
    busy, cpu = meter.stop()
    replay_rows.append(Row("NEURON_RT_INSPECT (session)", busy.cores, busy.utilization, cpu, *_disk(out)))
    run.stop_job()


def replay_report(seconds: float) -> None:
    if replay_rows:
        print(f"\ntrn1.32xlarge, {REPLAY.command}: {CORES} ranks; window {seconds:.0f} s per way")
        print(f"{'way':<30} {'cores busy':>10} {'utilization':>12} {'emulator CPU':>13} {'trace':>10} {'files':>6}")
    for r in replay_rows:
        size = f"{r.trace_bytes / 2**20:.1f} MiB"
        figures = f"{100 * r.utilization:>11.1f}% {100 * r.cpu:>12.1f}%"
        print(f"{r.name:<30} {r.cores:>10} {figures} {size:>10} {r.files:>6}")
    base = replay_rows[0].utilization if replay_rows else 0.0
    for r in replay_rows[1:]:
        delta = 100 * (r.utilization - base)
        verdict = "ok" if abs(delta) <= 2 and r.cpu < 1 else "MISSED"
        print(
            f"{r.name}: utilization {delta:+.1f} points vs not profiled (target within 2), "
            f"emulator {100 * r.cpu:.0f}% of one core (target < 100%): {verdict}"
        )
    for note in replay_notes:
        print(f"  {note}")
    for job, fmt, seconds, size in views:
        verdict = "ok" if seconds <= VIEW_TARGET else "MISSED"
        print(
            f"{job}: neuron-profile view --output-format {fmt}: {seconds:.1f} s (target <= {VIEW_TARGET:.0f} s), "
            f"{size / 2**20:.1f} MiB written: {verdict}"
        )


def _median(name: str, column: int) -> float:
    return statistics.median(row[column] for row in results[name])


def report() -> None:
    if not results["off"]:
        return
    print(f"gpt-tiny, {len(results['off'])} steps per variant (after {WARMUP_STEPS} warm-up steps per run)")
    row = "{:<9} {:>13} {:>13} {:>12} {:>12} {:>11} {:>10}"
    columns = [f"{what} ms/step" for what in ("host", "wall", "CPU", "glue")]
    print(row.format("capture", *columns, "host ratio", "CPU ratio"))
    for name in results:
        host, wall, cpu, glue = (_median(name, c) for c in range(4))
        ratio, cpu_ratio = host / _median("off", 0), cpu / _median("off", 2)
        figures = (f"{host * 1e3:.1f}", f"{wall * 1e3:.1f}", f"{cpu * 1e3:.1f}", f"{glue * 1e3:.3f}")
        verdict = "" if name == "off" else ("  target met" if ratio <= TARGET else f"  over the {TARGET:.2f}x target")
        print(row.format(name, *figures, f"{ratio:.3f}x", f"{cpu_ratio:.3f}x") + verdict)


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--steps", type=int, default=30, help="steps per training process (default 30)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of the three variants (default 3)")
    parts = ("tiny", "replay", "view", "all")
    parser.add_argument("--part", choices=parts, default="all", help="which part (default all)")
    parser.add_argument("--seconds", type=float, default=60.0, help="part 2: window per way (default 60)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.steps)
        return 0
    if args.steps <= WARMUP_STEPS or args.rounds < 1:
        parser.error(f"--steps must exceed {WARMUP_STEPS} and --rounds be at least 1")

    def body(run: Run) -> None:
        if args.part in ("tiny", "all"):
            gpt_tiny(run, args.steps, args.rounds)
        if args.part in ("replay", "all"):
            replay_job(run, args.seconds)
        if args.part in ("view", "all"):
            view_jobs(run)

    def both() -> None:
        report()
        if replay_rows or views:
            replay_report(args.seconds)

    return run_benchmark("profile_overhead", "nt-profile-", body, both)


if __name__ == "__main__":
    sys.exit(main())
