"""``neuron-emulator profile-graph GRAPH [--num-exec N] [--profile-nth-exec K] [--output-dir DIR] [--session-file F]``:
run one graph of the persistent compile cache on a free NeuronCore and profile one execution of
it, as ``neuron-profile capture -n NEFF`` does (what the emulated ``neuron-profile capture -n``
runs). The work is :func:`emulator.runtime.standalone.profile_graph`; docs/profiling.md.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

from emulator.cli.args import ArgumentError, Handler, positive_int
from emulator.runtime.errors import NeuronRuntimeError
from emulator.workloads.errors import report_error
from neurontools.contract.profile import DEFAULT_OUTPUT_DIR, TRACE_INFO
from neurontools.sources.daemon_client import DaemonError, DaemonUnavailable


def add(sub: Any) -> dict[str, Handler]:
    cmd = sub.add_parser(
        "profile-graph",
        help="run a cached graph on a free NeuronCore and profile one of its executions",
        description="Run graph GRAPH (its hash, or a prefix of it, in the persistent compile cache: "
        "NEURON_COMPILE_CACHE_URL) N times on a free NeuronCore of the daemon, at the cost model's pace, "
        "and profile the K-th execution into DIR/<instance-id>_pid_<pid>/ (docs/profiling.md).",
    )
    cmd.add_argument("graph", metavar="GRAPH", help="graph hash or prefix (hex)")
    cmd.add_argument("--num-exec", metavar="N", help="executions to run (default 1)")
    cmd.add_argument("--profile-nth-exec", metavar="K", help="the execution to profile (default: the last)")
    cmd.add_argument("--output-dir", metavar="DIR", default=DEFAULT_OUTPUT_DIR, help="default ./output")
    cmd.add_argument(
        "--session-file",
        metavar="FILE",
        help="also write the device profile to FILE, its graph file and trace_info.json beside it "
        "(what 'neuron-profile view -s FILE' reads)",
    )
    return {"profile-graph": run}


def _session_file(directory: Path, graph_hash: str, target: Path) -> None:
    """The capture's device profile as ``target``, with the files a session is read with beside it."""
    (profile,) = directory.glob(f"neff_{graph_hash}_vnc_*.ntff")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(profile, target)
    for name in (f"neff_{graph_hash}.neff", TRACE_INFO):
        shutil.copyfile(directory / name, target.parent / name)


def run(args: argparse.Namespace) -> int:
    from emulator.runtime.standalone import GraphNotFound, profile_graph

    try:
        graph = args.graph.strip().lower()
        if not graph or len(graph) > 64 or any(c not in "0123456789abcdef" for c in graph):
            raise ArgumentError(f"graph {args.graph[:70]!r}: expected a graph hash or a prefix of one (hex)")
        num_exec = positive_int("--num-exec", args.num_exec) or 1
        nth = positive_int("--profile-nth-exec", args.profile_nth_exec) or num_exec
        if nth > num_exec:
            raise ArgumentError(f"--profile-nth-exec {nth} is past --num-exec {num_exec}")
        done = profile_graph(graph, num_exec=num_exec, profile_nth=nth, output_dir=Path(args.output_dir))
        if args.session_file:
            _session_file(done.directory, done.graph_hash, Path(args.session_file))
    except (ArgumentError, GraphNotFound) as exc:
        report_error(str(exc))
        return 1
    except NeuronRuntimeError as exc:
        report_error(str(exc))
        return 1
    except (DaemonUnavailable, DaemonError) as exc:
        report_error(f"daemon: {exc}")
        return 1
    except OSError as exc:
        report_error(f"{exc.filename or args.output_dir}: {exc.strerror or exc}")
        return 1
    print(
        f"graph {done.graph_hash[:20]}: {done.executions} execution(s) of {done.device_seconds * 1e3:.3f} ms "
        f"(healthy core); execution {nth} profiled in {done.directory}"
    )
    return 0
