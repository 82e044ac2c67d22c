"""neuron-top's CPU use next to htop's, measured the same way in one run.

    python benchmarks/top_cpu.py [--seconds 60] [--job gpt3-6.7b-tp8dp4]

An emulated trn1.32xlarge running a published Trn1 training job on all 32 NeuronCores through
``neuron-emulator run`` (emulated_job.py): ``--job gpt3-6.7b-tp8dp4`` (default; ``gpt3-6.7b --tp 8
--dp 4 --global-batch 64``) or ``bert-large-dp32`` (``bert-large --dp 32 --micro-batch 16
--global-batch 16384 --seq-len 128``): 32 rank processes, each holding its core, replaying the
traced step at the modelled pace. The viewers start once the job is past step 1. Each viewer runs
in a tmux terminal (120x40, on a tmux server of its own) refreshing once a second —
``neuron-top --interval 1`` (its default) and ``htop -d 10`` (tenths of a second: 1 s; htop's
default is 1.5 s) — one after the other under the same load; its process CPU time (user +
system, psutil) over the window is printed as a fraction of one core. Target: neuron-top at or
below htop in the same run (AWS states 0.7 % for its neuron-top). Prints figures, asserts
nothing; stops everything it started, also on Ctrl-C.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from emulated_job import (
    BIN,
    CORES,
    JOBS,
    LoadMeter,
    Run,
    add_job_option,
    benchmark_parser,
    cpu_seconds,
    rss_bytes,
    run_benchmark,
)

TERMINAL = ("120", "40")


def viewer_cpu(run: Run, name: str, argv: list[str], seconds: float) -> tuple[float, int]:
    """Run ``argv`` in a detached tmux terminal; CPU % of one core over ``seconds`` after a warm-up."""
    session = f"nt-topbench-{name}-{time.monotonic_ns()}"
    tmux = ["tmux", "-L", session]  # a server of its own: it starts with this process's environment
    env_prefix = f"PATH={BIN}:$PATH NEURON_EMULATOR_ADDR={run.address}"
    command = f"{env_prefix} exec {' '.join(argv)}"
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", session, "-x", TERMINAL[0], "-y", TERMINAL[1], command], check=True
    )
    try:
        pane_pid = int(
            subprocess.run(
                [*tmux, "list-panes", "-t", session, "-F", "#{pane_pid}"], capture_output=True, text=True, check=True
            ).stdout.split()[0]
        )
        proc = psutil.Process(pane_pid)
        time.sleep(5)  # start-up (imports, first screen) is not what we measure
        tree = [proc, *proc.children(recursive=True)]
        before = cpu_seconds(tree)
        time.sleep(seconds)
        after = cpu_seconds(tree)
        return 100.0 * (after - before) / seconds, len(tree)
    finally:
        subprocess.run([*tmux, "send-keys", "-t", session, "q"], capture_output=True)
        time.sleep(1)
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--seconds", type=float, default=60.0, help="measurement window per viewer (default 60)")
    add_job_option(parser, "gpt3-6.7b-tp8dp4")
    args = parser.parse_args()
    for tool in ("tmux", "htop"):
        if shutil.which(tool) is None:
            print(f"top_cpu: {tool} is not installed (apt-get install -y {tool})", file=sys.stderr)
            return 1
    job = JOBS[args.job]

    def compare(run: Run) -> None:
        run.start_daemon()
        started = run.start_job(job, 100_000)  # runs until stopped
        run.wait_started(started)
        run.wait_step(started, 1, timeout=(started.traced() or (0, 0.0, 60.0))[2] + 120)
        ranks = started.ranks()
        meter = LoadMeter(run, started)
        rows = []
        for name, argv in (
            ("neuron-top", [str(BIN / "neuron-top"), "--interval", "1"]),
            ("htop", ["htop", "-d", "10"]),
        ):
            pct, nprocs = viewer_cpu(run, name, argv, args.seconds)
            rows.append((name, pct, nprocs))
        busy, cpu = meter.stop()
        print(
            f"load: trn1.32xlarge, {job.command}: {len(ranks)} rank processes, attached "
            f"{started.attached:.1f} s after the command, first execution at {started.first_execution:.1f} s; "
            f"{rss_bytes(ranks) / 2**20:.0f} MiB RSS for the ranks"
        )
        print(
            f"  during the viewers' windows: {busy.cores} of {CORES} NeuronCores busy, mean utilization "
            f"{100 * busy.utilization:.1f}%; the load (daemon, launcher, ranks) used "
            f"{100 * cpu:.1f}% of one core"
        )
        print(f"window: {args.seconds:.0f} s per viewer, refresh 1 s, terminal {'x'.join(TERMINAL)} (tmux)")
        print(f"{'viewer':<12} {'CPU % of one core':>18} {'processes':>10}")
        for name, pct, nprocs in rows:
            print(f"{name:<12} {pct:>17.2f}% {nprocs:>10}")
        top, htop = rows[0][1], rows[1][1]
        print(f"neuron-top / htop: {top / htop:.2f}x   (target: <= 1.00x; AWS states 0.7 % of one core for its own)")

    return run_benchmark("top_cpu", "nt-topbench-", compare)


if __name__ == "__main__":
    sys.exit(main())
