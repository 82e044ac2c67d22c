"""``neuron-profile``: capture and read device profiles (docs/profiling.md).

Verbs: ``view`` (a capture as summary-text, summary-json, json, perfetto or chrome-json),
``show-session`` (one device profile's session table), ``inspect`` (run a command with capture
on), ``capture`` (one graph under the emulator, or running processes through the daemon). Bad
flags, bad input and a missing emulator or daemon: one line ``neuron-profile: error: ...`` on
stderr and exit status 1; never a traceback.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from neurontools.cli import (
    STOPPED,
    CliError,
    UsageError,
    arguments,
    print_error,
    print_usage_error,
    show_version,
    silence_stdout,
    stopped_status,
)
from neurontools.contract.profile import DEFAULT_OUTPUT_DIR, ProfileFormatError
from neurontools.profile.load import LoadError
from neurontools.profile.parser import FORMATS, USAGE, parser

PROG = "neuron-profile"


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(argv)
    try:
        ns = parser(PROG).parse_args(args)
    except UsageError as exc:
        return print_usage_error(exc.prog or PROG, str(exc))
    if ns.version:
        return show_version(PROG)
    if ns.help or ns.verb is None:
        sys.stdout.write(USAGE)
        return 0 if ns.help else 1
    try:
        return _VERBS[ns.verb](ns)
    except (CliError, LoadError, ProfileFormatError) as exc:
        return print_error(PROG, str(exc))
    except STOPPED as exc:
        return stopped_status(exc)
    except BrokenPipeError:
        silence_stdout()
        return 0


def _out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


SUMMARIES = ("summary-text", "summary-json")  # formats that read only the executions (build's rows=False)


def _load(ns: Any) -> Any:
    from neurontools.profile.build import build
    from neurontools.profile.load import load

    rows = getattr(ns, "output_format", None) not in SUMMARIES
    return build(load(ns.directory, ns.session, ns.graph), rows=rows)


def _view(ns: Any) -> int:
    if (ns.directory is None) == (ns.session is None):
        raise CliError("view needs one of -d DIR or -s FILE")
    with _no_cycle_collection():
        timeline = _load(ns)
        fmt = ns.output_format
        if fmt in ("perfetto", "chrome-json"):
            from neurontools.profile import chrome, perfetto

            writer = perfetto if fmt == "perfetto" else chrome
            try:
                paths = writer.write(timeline, ns.output_file)
            except OSError as exc:
                raise CliError(f"cannot write {ns.output_file or 'the trace'}: {exc.strerror or exc}") from None
            _out("".join(f"wrote {p}\n" for p in paths))
            return 0
        text = _document(timeline, fmt, terminal=ns.output_file is None and sys.stdout.isatty())
    _emit(text, ns.output_file)
    return 0


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """The cyclic garbage collector off for the block: a large capture's view makes millions of
    small objects that form no reference cycles, and the collector's passes over them cost as much
    as the view itself (the build of a 32-rank capture took twice as long with it on)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _document(timeline: Any, fmt: str, *, terminal: bool = False) -> str:
    from neurontools.profile.render import timeline_json
    from neurontools.profile.summary import summarize, summary_document

    if fmt == "summary-text":
        from neurontools.profile.groups import collective_groups
        from neurontools.profile.summary_text import PIPED_WIDTH, summary_text

        width = shutil.get_terminal_size((PIPED_WIDTH, 24)).columns if terminal else PIPED_WIDTH
        return summary_text(summarize(timeline), collective_groups(timeline.executions), width=width, terminal=terminal)
    data = summary_document(timeline) if fmt == "summary-json" else timeline_json(timeline)
    return json.dumps(data, indent=2) + "\n"


def _emit(text: str, output_file: str | None) -> None:
    if output_file is None:
        _out(text)
        return
    try:
        Path(output_file).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot write {output_file}: {exc.strerror or exc}") from None
    _out(f"wrote {output_file}\n")


def _show_session(ns: Any) -> int:
    from neurontools.profile.build import build
    from neurontools.profile.load import load
    from neurontools.profile.render import show_session

    _out(show_session(build(load(session=ns.session))))
    return 0


def _inspect(ns: Any) -> int:
    from neurontools.profile.run import inspect_env, run_child

    command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    if not command:
        raise CliError("inspect needs a command to run, e.g. neuron-profile inspect -o DIR -- python train.py")
    env = inspect_env(os.environ, ns.output_dir, ns.max_events, ns.device_profile)
    return run_child(command, env)


def _capture(ns: Any) -> int:
    if (ns.graph is None) == (ns.pid is None):
        raise CliError("capture needs one of -n GRAPH or --pid PID")
    if ns.pid is not None:
        return _capture_pid(ns)
    from neurontools.profile.run import emulator_command, run_child

    argv = [emulator_command(), "profile-graph", ns.graph, "--num-exec", str(ns.num_exec)]
    argv += ["--profile-nth-exec", str(ns.profile_nth_exec), "--output-dir", ns.output_dir or DEFAULT_OUTPUT_DIR]
    if ns.session_file:
        argv += ["--session-file", ns.session_file]
    return run_child(argv)


def _capture_pid(ns: Any) -> int:
    from neurontools.profile import daemon_capture as dc
    from neurontools.sources.address import AddressError
    from neurontools.sources.daemon_client import DaemonClient, DaemonError, DaemonUnavailable

    output_dir = str(Path(ns.output_dir or DEFAULT_OUTPUT_DIR).resolve())
    try:
        client = DaemonClient()
        pids = dc.targets(client, ns.pid)
        dc.start(client, pids, ns.steps, output_dir)
        listed = ", ".join(map(str, pids))
        _out(f"profiling {len(pids)} process{'es' if len(pids) != 1 else ''} ({listed}) for {ns.steps} step(s)\n")
        results = dc.wait(client, pids, ns.timeout, _progress_line)
    except (DaemonUnavailable, AddressError) as exc:
        raise CliError(str(exc)) from None
    except DaemonError as exc:
        raise CliError(f"unexpected answer from the Neuron emulator daemon: {exc}") from None
    failed = [r for r in results if r.state == dc.FAILED]
    _out(f"profile in {output_dir}\nview it with: {PROG} view -d {output_dir}\n")
    if failed:
        raise CliError("; ".join(f"process {r.pid}: {r.error or 'failed'}" for r in failed))
    return 0


def _progress_line(progress: Any) -> None:
    dirs = f" -> {', '.join(progress.dirs)}" if progress.dirs else ""
    error = f" ({progress.error})" if progress.error else ""
    _out(f"pid {progress.pid}: {progress.state}{dirs}{error}\n")


_VERBS = {"view": _view, "show-session": _show_session, "inspect": _inspect, "capture": _capture}
__all__ = ["FORMATS", "PROG", "main"]
