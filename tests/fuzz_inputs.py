"""Input fuzzers of the tools (docs/fuzzing.md): neuron-monitor configuration files, the
neuron-monitor NDJSON that neuron-monitor-prometheus and ``neuron-top --source -`` read, the
runtime's environment (NEURON_RT_VISIBLE_CORES, NEURON_RT_NUM_CORES, LOCAL_RANK, NEURON_CC_FLAGS)
and every command line's flags. Each ``fuzz_*`` runs one target in-process for a number of
generated examples and records what went wrong in a ``FuzzStats``; tests/test_fuzz_inputs.py runs
them with CI-sized counts, scripts/fuzz.py with many more.

The rule checked everywhere: bad input gives one clear line (or a skipped line in a stream) and
a non-zero exit, never a traceback, an unexpected exception or a hang.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from tests.fuzz_support import (
    NASTY_TEXT,
    FuzzStats,
    documents,
    dumps,
    mutated,
    run_given,
)

FIXTURES = Path(__file__).parent / "fixtures" / "report"
SLOW_S = 30.0  # one input taking longer than this to be handled is a hang (they take milliseconds)


def one_line(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip()]
    return len(lines) <= 1 and "Traceback" not in text


@contextlib.contextmanager
def timed(stats: FuzzStats, target: str, what: Callable[[], str]) -> Iterator[None]:
    """Counts one input; an unexpected exception or a slow answer is a failure."""
    stats.count(target)
    started = time.monotonic()
    try:
        yield
    except Exception as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        stats.fail(target, f"{exc!r} at {Path(frame.filename).name}:{frame.lineno} for {what()}")
    elapsed = time.monotonic() - started
    if elapsed > SLOW_S:
        stats.fail(target, f"took {elapsed:.1f} s for {what()}")


def _show(data: Any, limit: int = 300) -> str:
    text = ascii(data)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


# -- neuron-monitor configuration --------------------------------------------------------------------


def full_config() -> dict[str, Any]:
    from neurontools.contract.schema import APP_GROUPS, SYSTEM_GROUPS

    return {
        "period": "1s",
        "neuron_runtimes": [
            {"tag_filter": "^train", "period": "2s", "metrics": [{"type": g, "period": "500ms"} for g in APP_GROUPS]},
            {"metrics": [{"type": next(iter(APP_GROUPS))}]},
        ],
        "system_metrics": [{"type": g} for g in SYSTEM_GROUPS],
    }


def fuzz_monitor_config(stats: FuzzStats, examples: int, seed: int | None = None) -> None:
    """``parse_config`` (the text of ``-c FILE``) and ``load_config`` (its bytes): a valid
    ``MonitorConfig`` or one ``ConfigError`` line, nothing else; a valid one builds reports."""
    from neurontools.monitor.config import ConfigError, load_config, parse_config
    from neurontools.report.builder import ReportBuilder

    base = full_config()
    strategy = st.one_of(documents(base), mutated({"period": "5s"}).map(dumps), st.just(b""), st.just(b"\xff\xfe"))
    with tempfile.TemporaryDirectory(prefix="fuzz-cfg-") as tmp:
        path = Path(tmp) / "monitor.json"

        def check(raw: bytes) -> None:
            with timed(stats, "neuron-monitor config", lambda: _show(raw)):
                path.write_bytes(raw)
                for parse in (lambda: load_config(path), lambda: parse_config(raw.decode("utf-8", "replace"))):
                    try:
                        config = parse()
                    except ConfigError as exc:
                        if not one_line(str(exc)) or not str(exc).strip():
                            stats.fail("neuron-monitor config", f"not one line: {str(exc)[:300]!r}")
                        continue
                    if not all(0.1 <= p < 1e10 for p in config.periods().values()):
                        stats.fail("neuron-monitor config", f"accepted periods {config.periods()}")
                    ReportBuilder(config)

        run_given(strategy, examples, check, seed=seed)


# -- neuron-monitor reports (NDJSON) ------------------------------------------------------------------


def base_reports() -> list[dict[str, Any]]:
    """Real reports: the spec's, an idle line, and ours built from two daemon snapshots."""
    from neurontools.monitor.config import default_config
    from neurontools.report.builder import ReportBuilder
    from neurontools.report.encoding import encode_report
    from tests.snapshots import parsed, recorded

    reports = [
        json.loads((FIXTURES / name).read_text()) for name in ("spec_illustrative_report.json", "spec_idle_line.json")
    ]
    builder = ReportBuilder(default_config())
    due = default_config().group_keys()
    for name in ("trn1_2xlarge_train_prev", "trn1_2xlarge_train_cur"):
        snap = parsed(recorded(name))
        reports.append(json.loads(encode_report(builder.update(snap, due))))
    return reports


def report_lines(reports: Sequence[dict[str, Any]]) -> st.SearchStrategy[list[bytes]]:
    """A stream's lines: valid reports, mutated and garbled ones, blank lines, huge lines."""
    line = st.one_of(
        st.sampled_from([dumps(r) for r in reports]),
        *(documents(r) for r in reports),
        st.sampled_from((b"", b"   ", b"\t", b"\r")),
        st.sampled_from((b"[]", b"null", b"42", b'"report"', b"{}")),
    )
    return st.lists(line.map(lambda text: text.replace(b"\n", b" ")), min_size=1, max_size=8)


def _is_report(line: bytes) -> bool | None:
    """True: a JSON object; False: not one (to be skipped); None: blank (ignored)."""
    if not line.strip():
        return None
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):
        return False


class ThreadErrors:
    """Exceptions that escaped any thread while active (a reader thread dying is a failure)."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def __enter__(self) -> ThreadErrors:
        self._previous = threading.excepthook
        threading.excepthook = lambda args: self.errors.append(f"{args.thread.name}: {args.exc_value!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        threading.excepthook = self._previous


def fuzz_report_stream(stats: FuzzStats, examples: int, seed: int | None = None) -> list[Any]:
    """``ReportStream`` (``neuron-top --source -``) and neuron-top's mapping of what it hands out:
    every JSON object line becomes a report, every other non-blank line is skipped and counted,
    and each report maps to a ``Sample`` the screen can show. Returns the samples (for a
    rendering test)."""
    from neurontools.sources.report_stream import MAX_LINE_BYTES, ReportStream, StreamEnded
    from neurontools.top.sampler import Sampler
    from neurontools.top.sources import StreamSource
    from neurontools.top.view import core_utilizations, selected, tabs

    samples: list[Any] = []
    reports = base_reports()

    def check(lines: list[bytes]) -> None:
        data = b"\n".join(lines) + b"\n"
        with timed(stats, "neuron-top --source - stream", lambda: _show(data)), ThreadErrors() as thread_errors:
            stream = ReportStream(io.BytesIO(data))
            sampler = Sampler(StreamSource(stream, "0.0"), "0.0")
            got = 0
            while True:
                sample = sampler.next()
                if sampler.ended:
                    break
                if sample is not None:
                    got += 1
                    for pid in [None, *(app.pid for app in sample.apps)]:
                        selected(sample, pid)
                        core_utilizations(sample, pid, 32)
                    tabs(sample)
                    samples.append(sample)
            with contextlib.suppress(StreamEnded):
                stream.next_report(0.1)
            kinds = [_is_report(line) if len(line) <= MAX_LINE_BYTES else False for line in lines]
            if got != kinds.count(True) or stream.bad_lines != kinds.count(False):
                stats.fail(
                    "neuron-top --source - stream",
                    f"{got} reports and {stream.bad_lines} skipped lines, expected {kinds.count(True)} and "
                    f"{kinds.count(False)}: {_show(data)}",
                )
            if thread_errors.errors:
                stats.fail("neuron-top --source - stream", f"reader thread died: {thread_errors.errors}")

    run_given(report_lines(reports), examples, check, seed=seed)
    return samples


def fuzz_compat_pump(stats: FuzzStats, examples: int, seed: int | None = None) -> None:
    """neuron-monitor-prometheus's loop: each line that is not a JSON object prints one
    ``Unable to decode JSON`` line and is skipped, every message is one line, and the metrics
    page renders afterwards (what a scrape sends)."""
    from prometheus_client.exposition import generate_latest

    from neurontools.exporter.compat import CompatMetrics
    from neurontools.exporter.compat_cli import build_registry, pump
    from neurontools.sources.report_stream import read_lines

    reports = base_reports()

    def check(lines: list[bytes]) -> None:
        data = b"\n".join(lines) + b"\n"
        with timed(stats, "neuron-monitor-prometheus stdin", lambda: _show(data)):
            metrics = CompatMetrics()
            registry = build_registry(metrics)
            out, err = io.StringIO(), io.StringIO()
            pump(read_lines(io.BytesIO(data)), metrics, out, err)
            kinds = [_is_report(line) for line in lines]
            decode_errors = [ln for ln in out.getvalue().splitlines() if ln.startswith("Unable to decode JSON")]
            if len(decode_errors) != kinds.count(False) or len(out.getvalue().splitlines()) != kinds.count(False):
                stats.fail("neuron-monitor-prometheus stdin", f"stdout {out.getvalue()[:500]!r} for {_show(data)}")
            if "Traceback" in err.getvalue():
                stats.fail("neuron-monitor-prometheus stdin", f"stderr {err.getvalue()[:500]!r}")
            page = generate_latest(registry)
            page.decode("utf-8")

    run_given(report_lines(reports), examples, check, seed=seed)


# -- the runtime's environment --------------------------------------------------------------------------

_core_token = st.one_of(
    st.integers(0, 40).map(str),
    st.sampled_from(("0-3", "3-0", "0-10000000000", "1-1", " 2 ", "²", "٣", "9" * 5000, "-1", "1--2", "", "a", "0x1")),
    st.text(alphabet="0123456789-, \t", max_size=8),
)
core_specs = st.one_of(
    st.lists(_core_token, max_size=4).map(",".join), st.text(max_size=12), st.sampled_from(NASTY_TEXT)
)
counts = st.one_of(st.integers(-2, 200).map(str), st.sampled_from(NASTY_TEXT), st.text(max_size=6))


def fuzz_core_env(stats: FuzzStats, examples: int, seed: int | None = None) -> None:
    """``request_from_env`` (and ``--cores``): a ``CoreRequest`` with contiguous, increasing ids of
    a sane count, or one ``CoreSpecError`` line."""
    from emulator.cli.args import ArgumentError, core_ids
    from emulator.runtime.core_spec import CoreSpecError, request_from_env

    env_strategy = st.fixed_dictionaries(
        {},
        optional={"NEURON_RT_VISIBLE_CORES": core_specs, "NEURON_RT_NUM_CORES": counts, "LOCAL_RANK": counts},
    )

    def check(env: dict[str, str]) -> None:
        with timed(stats, "NEURON_RT_VISIBLE_CORES/NUM_CORES", lambda: _show(env)):
            try:
                request = request_from_env(env)
            except CoreSpecError as exc:
                if not one_line(str(exc)):
                    stats.fail("NEURON_RT_VISIBLE_CORES/NUM_CORES", f"not one line: {str(exc)[:300]!r}")
            else:
                ids = request.visible_cores
                if ids is not None and (not ids or any(b != a + 1 for a, b in itertools.pairwise(ids))):
                    stats.fail("NEURON_RT_VISIBLE_CORES/NUM_CORES", f"accepted {ids} for {_show(env)}")
                if request.num_cores is not None and request.num_cores < 1:
                    stats.fail("NEURON_RT_VISIBLE_CORES/NUM_CORES", f"num_cores {request.num_cores}")
            spec = env.get("NEURON_RT_VISIBLE_CORES")
            if spec is not None:
                with contextlib.suppress(ArgumentError):
                    core_ids(spec)

    run_given(env_strategy, examples, check, seed=seed)


_cc_words = st.sampled_from(
    (
        "--auto-cast",
        "--auto-cast=all",
        "--auto-cast=none",
        "--auto-cast-type",
        "--auto-cast-type=fp8_e4m3",
        "all",
        "matmult",
        "bf16",
        "tf32",
        "--no_cache",
        "--cache_dir",
        "--cache_dir=/nonexistent/dir",
        "--cache_dir=s3://bucket/x",
        "--model-type=transformer",
        "-O2",
        '"',
        "'",
        "\\",
        "\x00",
        "--auto-cast=",
    )
)
cc_flags = st.one_of(
    st.lists(st.one_of(_cc_words, st.text(max_size=6)), max_size=5).map(" ".join), st.text(max_size=20)
)


def fuzz_cc_flags(stats: FuzzStats, examples: int, seed: int | None = None) -> None:
    """NEURON_CC_FLAGS (with the other cost-model switches): ``options_from_env`` gives options or
    one ``ValueError`` line; ``cache_settings`` never fails; ``--auto-cast`` rewriting keeps it
    parseable or says why in one line."""
    from emulator.cli.args import ArgumentError
    from emulator.cli.training import with_auto_cast
    from emulator.costmodel.dtypes import options_from_env
    from emulator.runtime.compile_cache import cache_settings

    env_strategy = st.fixed_dictionaries(
        {"NEURON_CC_FLAGS": cc_flags},
        optional={
            "XLA_USE_BF16": st.sampled_from(("0", "1", "yes", "", "2")),
            "NEURON_RT_STOCHASTIC_ROUNDING_EN": st.sampled_from(("0", "1", "true", "x")),
            "NEURON_COMPILE_CACHE_URL": st.sampled_from(("/tmp/x", "s3://b/c", "")),
        },
    )

    def check(env: dict[str, str]) -> None:
        with timed(stats, "NEURON_CC_FLAGS", lambda: _show(env)):
            try:
                options_from_env(env)
            except ValueError as exc:
                if not one_line(str(exc)):
                    stats.fail("NEURON_CC_FLAGS", f"not one line: {str(exc)[:300]!r}")
            cache_settings(env)
            try:
                rewritten = with_auto_cast(env["NEURON_CC_FLAGS"], "matmult")
            except ArgumentError as exc:
                if not one_line(str(exc)):
                    stats.fail("NEURON_CC_FLAGS", f"not one line: {str(exc)[:300]!r}")
            else:
                with contextlib.suppress(ValueError):  # another flag of it may still be bad
                    if options_from_env({"NEURON_CC_FLAGS": rewritten}).auto_cast != "matmult":
                        stats.fail("NEURON_CC_FLAGS", f"--auto-cast matmult lost in {rewritten!r}")

    run_given(env_strategy, examples, check, seed=seed)


# -- command lines ----------------------------------------------------------------------------------------

# values that fail safely wherever they go: no address here reaches a daemon, no port is bindable
BAD_PORTS = ("0", "65536", "-1", "99999", "x", "", "1e3", "²")
_values = st.one_of(st.sampled_from(NASTY_TEXT), st.text(max_size=8), st.sampled_from(("1", "0.5", "nan", "inf", "-")))


def _flags(spec: dict[str, st.SearchStrategy[str] | None]) -> st.SearchStrategy[list[str]]:
    """A few of ``spec``'s flags (None: takes no value), in any order, with stray tokens."""
    flag = st.sampled_from(sorted(spec)).flatmap(
        lambda name: st.just([name]) if spec[name] is None else spec[name].map(lambda v, n=name: [n, v])  # type: ignore[union-attr]
    )
    stray = st.one_of(_values, st.sampled_from(("--", "-", "--bogus", "-zz", "--help=1"))).map(lambda v: [v])
    return st.lists(st.one_of(flag, flag, stray), max_size=4).map(lambda parts: [t for p in parts for t in p])


def _paths(tmp: str) -> st.SearchStrategy[str]:
    """Paths where nothing listens: a missing directory, a regular file, a directory."""
    return st.sampled_from((f"{tmp}/missing/x.sock", f"{tmp}/file", tmp, "", f"{tmp}/missing/log"))


def cli_argv(tmp: str) -> dict[str, st.SearchStrategy[list[str]]]:
    """Generated command lines per CLI. Values that could start something real (a free port,
    a reachable socket) are never generated: every run ends in a parse or validation error, help
    or version, or an answer that no daemon is running."""
    interval = st.one_of(st.sampled_from(("1", "0.1", "0.05", "3600", "3601", "nan", "inf", "-1", "1e-400")), _values)
    configs = st.sampled_from(
        (f"{tmp}/valid.json", f"{tmp}/invalid.json", f"{tmp}/binary.json", f"{tmp}/missing.json", tmp)
    )
    ports = st.sampled_from(BAD_PORTS)
    ls = {f"-{c}": None for c in "wajth"} | {
        f"--{n}": None for n in ("wide", "show-all-procs", "json-output", "topology")
    }
    workloads = st.sampled_from(("gpt-tiny", "mlp-tiny", "gpt3-6.7b", "bert-large", "nosuch", "", "²"))
    numbers = st.one_of(st.sampled_from(("1", "8", "0", "-3", "²", "٣", "9" * 5000, "1.5", "1e3")), _values)
    run_flags = {
        "--steps": numbers,
        "--batch-size": numbers,
        "--seq-len": numbers,
        "--dtype": st.sampled_from(("bf16", "fp32", "int4", "")),
        "--lr": st.sampled_from(("1e-3", "0", "-1", "nan", "inf", "x")),
        "--cores": core_specs,
        "--nproc": numbers,
        "--tp": numbers,
        "--pp": numbers,
        "--dp": numbers,
        "--micro-batch": numbers,
        "--global-batch": numbers,
        "--schedule": st.sampled_from(("1f1b", "gpipe", "zigzag")),
        "--zero1": None,
        "--recompute": st.sampled_from(("full", "selective", "none", "bogus")),
        "--no-recompute": None,
        "--recompute-mlp": st.sampled_from(("none", "activation", "module", "bogus")),
        "--sdk": st.sampled_from(("2.18", "2.3.0", "1.0", "latest")),
        "--flash-attention": None,
        "--no-master-weights": None,
        "--auto-cast": st.sampled_from(("all", "none", "bogus")),
    }
    bench_flags = {k: v for k, v in run_flags.items() if k not in ("--cores", "--nproc", "--steps", "--lr")}
    bench_flags |= {"--json": None, "--nodes": numbers, "--instance-type": st.sampled_from(("trn1.32xlarge", "p5"))}
    identity = {
        f: st.one_of(st.sampled_from(("i-0123456789abcdef0", "us-west-2", "bad id", "")), _values)
        for f in ("--instance-id", "--instance-name", "--region", "--availability-zone", "--ami-id", "--subnet-id")
    }
    up_flags = {
        "--instance-type": st.sampled_from(("trn1.2xlarge", "trn1.32xlarge", "trn2", "")),
        "--detach": None,
        # only where no daemon can start: `up` would serve, `up --detach` would start one
        "--socket": st.sampled_from((f"{tmp}/missing/x.sock", "")),
        "--port": ports,
        "--bind": st.sampled_from(("0.0.0.0", "::", "localhost", "")),
        "--socket-group": st.sampled_from(("0", "nosuchgroup", "", "99999")),
        "--log-file": st.sampled_from((f"{tmp}/missing/log", "")),
        **identity,
    }
    where = {"--socket": _paths(tmp), "--port": ports}
    emulator = st.one_of(
        _flags(up_flags).map(lambda f: ["up", *f]),
        _flags(where).map(lambda f: ["down", *f]),
        _flags({**where, "--json": None}).map(lambda f: ["status", *f]),
        _flags(
            {**where, "--device": numbers, "--type": st.sampled_from(("mem_ecc_corrected", "x")), "--count": numbers}
        ).map(lambda f: ["fault", "ecc", *f]),
        st.tuples(workloads, _flags(run_flags)).map(lambda t: ["run", t[0], *t[1]]),
        # a known model is never benchmarked for real here (seconds each): the model name is bad
        st.tuples(st.sampled_from(("nosuch", "gpt5")), _flags(bench_flags)).map(lambda t: ["bench", t[0], *t[1]]),
        st.just(["workloads"]),
        _flags({"--instance-type": st.just("trn1.2xlarge"), "--workload": workloads, "--exporter-port": numbers}).map(
            lambda f: ["demo", *f]
        ),
        _flags({"--version": None, "-h": None}),
        st.sampled_from((["--help"], ["up", "--help"], ["run", "--help"], ["bogus"], [])),
    )
    return {
        "neuron-ls": _flags({**ls, "--bogus": None, "-x": None}),
        "neuron-top": _flags(
            {
                "--interval": interval,
                "--source": st.sampled_from(("-", "", "ftp://x", f"{tmp}/no.sock")),
                "--version": None,
                "-h": None,
            }
        ),
        "neuron-monitor": _flags({"-c": configs, "--config-file": configs, "--verbose": numbers, "-h": None}),
        "neuron-exporter": _flags(
            {
                "--bind": st.sampled_from(("127.0.0.1", "nope", "::1")),
                "-p": ports,
                "--port": ports,
                "--interval": interval,
                "--per-process": None,
                "--enable-k8s-info": None,
                "--version": None,
                "-h": None,
            }
        ),
        "neuron-monitor-prometheus": _flags(
            {
                "-p": ports,
                "--port": ports,
                "--bind": st.sampled_from(("", "nope")),
                "--key-file": _paths(tmp),
                "--cert-file": _paths(tmp),
                "--enable-k8s-info": None,
                "-h": None,
            }
        ),
        "neuron-emulator": emulator,
    }


def cli_mains() -> dict[str, Callable[[list[str]], int | None]]:
    from emulator.cli import main as emulator_main
    from neurontools.exporter.cli import main as exporter_main
    from neurontools.exporter.compat_cli import main as prometheus_main
    from neurontools.ls.cli import main as ls_main
    from neurontools.monitor.cli import main as monitor_main
    from neurontools.top.app import main as top_main

    return {
        "neuron-ls": ls_main,
        "neuron-top": top_main,
        "neuron-monitor": monitor_main,
        "neuron-exporter": exporter_main,
        "neuron-monitor-prometheus": prometheus_main,
        "neuron-emulator": emulator_main,
    }


def _would_serve(tool: str, argv: list[str]) -> bool:
    """Flags that parse and would start a server (it runs until stopped): only parsed here."""
    if tool == "neuron-exporter":
        from neurontools.exporter.cli import UsageError, parse_args

        try:
            opts = parse_args(argv)
        except UsageError:
            return False
        return not (opts.help or opts.version)
    if tool == "neuron-monitor-prometheus":
        from neurontools.exporter.compat_cli import UsageError as PromUsage
        from neurontools.exporter.compat_cli import parse_args as prom_parse

        try:
            opts = prom_parse(argv)
        except PromUsage:
            return False
        return not opts.help
    return False


@contextlib.contextmanager
def _environment(tmp: str) -> Iterator[None]:
    """No daemon anywhere the tools look, and no terminal."""
    saved = dict(os.environ)
    os.environ["NEURON_EMULATOR_ADDR"] = f"{tmp}/missing/daemon.sock"
    os.environ["XDG_RUNTIME_DIR"] = f"{tmp}/missing"
    for name in ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES", "LOCAL_RANK", "NEURON_EMULATOR_TOKEN"):
        os.environ.pop(name, None)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def prepare_cli_files(tmp: str) -> None:
    Path(tmp, "valid.json").write_text(json.dumps(full_config()))
    Path(tmp, "invalid.json").write_text('{"period": "0s"}')
    Path(tmp, "binary.json").write_bytes(b"\xff\x00{")
    Path(tmp, "file").write_text("not a socket")


def run_cli_in_process(main: Callable[[list[str]], int | None], argv: list[str]) -> tuple[int, str, str]:
    """``main(argv)`` with captured output; SystemExit is an exit, other exceptions propagate."""
    out, err = io.StringIO(), io.StringIO()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        for sig, handler in handlers.items():  # a CLI's own handlers must not outlive its run
            signal.signal(sig, handler)
    return int(code or 0), out.getvalue(), err.getvalue()


def fuzz_cli_argv(stats: FuzzStats, examples: int, seed: int | None = None, tools: Sequence[str] | None = None) -> None:
    """Every CLI's ``main(argv)`` in-process: exit 0, 1 or 2, at most one line on stderr, no
    traceback, no exception, no hang."""
    mains = cli_mains()
    with tempfile.TemporaryDirectory(prefix="fuzz-cli-", dir="/tmp") as tmp, _environment(tmp):
        prepare_cli_files(tmp)
        strategies = cli_argv(tmp)
        for tool in tools or strategies:

            def check(argv: list[str], tool: str = tool) -> None:
                target = f"{tool} argv"
                if _would_serve(tool, argv):
                    stats.count(target)
                    return
                with timed(stats, target, lambda: f"{tool} {_show(argv)}"):
                    code, out, err = run_cli_in_process(mains[tool], argv)
                    if code not in (0, 1, 2):
                        stats.fail(target, f"exit {code} for {_show(argv)}: {err[:300]!r}")
                    if not one_line(err):
                        stats.fail(target, f"stderr {err[:600]!r} for {_show(argv)}")
                    if code != 0 and not (err.strip() or out.strip()):
                        stats.fail(target, f"exit {code} without a word for {_show(argv)}")

            run_given(strategies[tool], examples, check, seed=seed)
    sys.stdout.flush()


# Every fuzzer of this module by name, with its example count in CI (tests/test_fuzz_inputs.py);
# scripts/fuzz.py runs multiples of these counts, round after round.
CI_FUZZERS: dict[str, tuple[Callable[..., Any], int]] = {
    "neuron-monitor config": (fuzz_monitor_config, 300),
    "NDJSON: neuron-top --source -": (fuzz_report_stream, 150),
    "NDJSON: neuron-monitor-prometheus": (fuzz_compat_pump, 150),
    "core selection environment": (fuzz_core_env, 400),
    "NEURON_CC_FLAGS": (fuzz_cc_flags, 300),
    "command lines": (fuzz_cli_argv, 120),
}
