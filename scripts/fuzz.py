"""Run every fuzzer of the test suite for longer: ``scripts/fuzz.py [--minutes N] [--seed S]``.

The targets are the ones tests/test_fuzz_api.py and tests/test_fuzz_inputs.py run with small,
derandomized example counts in CI (docs/fuzzing.md). Here they run in rounds, each round with a new
seed and more examples per target, until the time is up; the counts per target, the requests
generated and every failure (with the request or input that caused it) are printed at the end.
Exit status 1 when anything failed. Everything runs in this process; nothing listens on a port.

    .venv/bin/python scripts/fuzz.py --minutes 10
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tests.*

from tests.fuzz_inputs import CI_FUZZERS
from tests.fuzz_support import (
    FuzzStats,
    daemon_problems,
    fuzz_daemon_api,
    fuzz_daemon_requests,
    fuzz_exporter_api,
    fuzz_exporter_requests,
)

HTTP_TARGETS = ("daemon ", "exporter ")  # counted as requests generated


def _daemon_api(stats: FuzzStats, scale: int, seed: int) -> None:
    app = fuzz_daemon_api(stats, examples=45 * scale, heavy_examples=12 * scale, seed=seed)
    for problem in daemon_problems(app):
        stats.fail("daemon consistency after schemathesis", problem)


def _daemon_requests(stats: FuzzStats, scale: int, seed: int) -> None:
    app = fuzz_daemon_requests(stats, 300 * scale, seed=seed)
    for problem in daemon_problems(app):
        stats.fail("daemon consistency after hostile requests", problem)


def _exporter_api(stats: FuzzStats, scale: int, seed: int) -> None:
    fuzz_exporter_api(stats, examples=175 * scale, seed=seed)


def _scaled(fuzz: Callable[..., None], examples: int) -> Callable[[FuzzStats, int, int], None]:
    """A target whose CI run takes ``examples`` examples."""
    return lambda stats, scale, seed: fuzz(stats, examples * scale, seed=seed)


# every target with its CI example count (tests/test_fuzz_*.py), times --scale per round
TARGETS: dict[str, Callable[[FuzzStats, int, int], None]] = {
    "daemon API (schemathesis)": _daemon_api,
    "exporter API (schemathesis)": _exporter_api,
    "daemon hostile requests": _daemon_requests,
    "exporter hostile requests": _scaled(fuzz_exporter_requests, 200),
    **{name: _scaled(fuzz, examples) for name, (fuzz, examples) in CI_FUZZERS.items()},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/fuzz.py", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="how long to keep fuzzing (default 5)")
    parser.add_argument("--seed", type=int, default=int(time.time()), help="first round's seed (default: now)")
    parser.add_argument("--scale", type=int, default=4, help="examples per target per round, x the CI counts")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.scale < 1:
        parser.error("--minutes must be positive and --scale at least 1")

    stats = FuzzStats()
    deadline = time.monotonic() + args.minutes * 60
    started = time.monotonic()
    rounds = 0
    seed = args.seed
    while time.monotonic() < deadline:
        rounds += 1
        for name, run in TARGETS.items():
            if time.monotonic() >= deadline:
                break
            before = stats.total
            t0 = time.monotonic()
            run(stats, args.scale, seed)
            print(
                f"round {rounds} seed {seed}: {name}: {stats.total - before} in {time.monotonic() - t0:.1f} s, "
                f"{len(stats.failures)} failures so far",
                flush=True,
            )
            seed += 1

    requests = sum(n for target, n in stats.counts.items() if target.startswith(HTTP_TARGETS))
    print()
    print(f"rounds: {rounds} (first seed {args.seed}), {time.monotonic() - started:.0f} s")
    print(stats.summary())
    print(f"HTTP requests generated: {requests}; other inputs: {stats.total - requests}")
    for failure in stats.failures:
        print("FAILURE", failure)
    return 1 if stats.failures else 0


if __name__ == "__main__":
    sys.exit(main())
