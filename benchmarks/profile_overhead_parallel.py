"""What profiling costs a 32-rank model-scale job: GPT3-6.7B TP8xDP4 with and without profiling.

    python benchmarks/profile_overhead_parallel.py [--seconds 60] [--job gpt3-6.7b-tp8dp4]

An emulated trn1.32xlarge (emulated_job.py) runs the job on all 32 NeuronCores three ways, each
measured over the same window once past step 1: (1) not profiled; (2) the same job, every rank
asked by the daemon to profile the window's steps (``POST /v1/processes/{pid}/profile``, what
``neuron-profile capture --pid`` sends; every execution profiled); (3) a new job under
``NEURON_RT_INSPECT_ENABLE=1`` with ``NEURON_RT_INSPECT_DEVICE_PROFILE=session`` (every execution
of every rank profiled from step 1). For each: the job's modelled utilisation (the mean busy share
of the NeuronCores from the daemon's snapshots, the figure neuron-monitor reports), the CPU the
emulator uses (daemon, launcher and the 32 ranks, psutil, as a share of one core) and the trace
written. Targets (docs/profiling.md §Parallel jobs): utilisation within 2 points of the
unprofiled job's, the emulator under one core. Prints figures, asserts nothing; stops everything
it started, also on Ctrl-C.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from emulated_job import (
    CORES,
    JOBS,
    BenchError,
    LoadMeter,
    Run,
    add_job_option,
    benchmark_parser,
    run_benchmark,
)


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


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--seconds", type=float, default=60.0, help="measurement window per way (default 60)")
    add_job_option(parser, "gpt3-6.7b-tp8dp4")
    args = parser.parse_args()
    job = JOBS[args.job]
    rows: list[Row] = []
    notes: list[str] = []

    def started(run: Run, extra_env: dict[str, str] | None = None) -> LoadMeter:
        running = run.start_job(job, 100_000, extra_env=extra_env)  # runs until stopped
        run.wait_started(running)
        run.wait_step(running, 1, timeout=(running.traced() or (0, 0.0, 60.0))[2] + 120)
        notes.append(f"{'profiled' if extra_env else 'plain'} job: planned step {running.step_seconds() or 0:.2f} s")
        return LoadMeter(run, running)

    def measure(run: Run) -> None:
        run.start_daemon()
        meter = started(run)
        time.sleep(args.seconds)
        busy, cpu = meter.stop()
        rows.append(Row("not profiled", busy.cores, busy.utilization, cpu, 0, 0))
        # the same job, every rank profiled at the daemon's request for about one window
        assert run.job is not None
        steps = max(1, round(args.seconds / (run.job.step_seconds() or 10.0)))
        out = run.tmp / "capture-pid"
        meter = LoadMeter(run, run.job)
        errors = _wait_done(run, _request_all(run, out, steps), timeout=args.seconds * 3 + 60)
        busy, cpu = meter.stop()
        rows.append(Row(f"capture --pid, {steps} steps", busy.cores, busy.utilization, cpu, *_disk(out)))
        notes.extend(f"request failed: {e}" for e in errors)
        run.stop_job()
        # a new job profiled from its start by the runtime's variables
        out = run.tmp / "inspect"
        env = {
            "NEURON_RT_INSPECT_ENABLE": "1",
            "NEURON_RT_INSPECT_OUTPUT_DIR": str(out),
            "NEURON_RT_INSPECT_DEVICE_PROFILE": "session",
        }
        meter = started(run, env)
        before = _disk(out)
        time.sleep(args.seconds)
        busy, cpu = meter.stop()
        after = _disk(out)
        rows.append(Row("NEURON_RT_INSPECT (session)", busy.cores, busy.utilization, cpu, after[0], after[1]))
        notes.append(f"inspect: {(after[0] - before[0]) / 2**20:.1f} MiB written during the window")
        run.stop_job()

    def report() -> None:
        print(f"trn1.32xlarge, {job.command}: {CORES} ranks; window {args.seconds:.0f} s per way")
        print(f"{'way':<30} {'cores busy':>10} {'utilization':>12} {'emulator CPU':>13} {'trace':>10} {'files':>6}")
        for r in rows:
            size = f"{r.trace_bytes / 2**20:.1f} MiB"
            figures = f"{100 * r.utilization:>11.1f}% {100 * r.cpu:>12.1f}%"
            print(f"{r.name:<30} {r.cores:>10} {figures} {size:>10} {r.files:>6}")
        base = rows[0].utilization
        for r in rows[1:]:
            delta = 100 * (r.utilization - base)
            verdict = "ok" if abs(delta) <= 2 and r.cpu < 1 else "MISSED"
            print(
                f"{r.name}: utilization {delta:+.1f} points vs not profiled (target within 2), "
                f"emulator {100 * r.cpu:.0f}% of one core (target < 100%): {verdict}"
            )
        for note in notes:
            print(f"  {note}")

    return run_benchmark("profile_overhead_parallel", "nt-profbench-", measure, report)


if __name__ == "__main__":
    sys.exit(main())
