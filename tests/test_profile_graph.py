"""``neuron-emulator profile-graph GRAPH``: a graph a tiny run left in the persistent compile cache,
run standalone on a free NeuronCore and one of its executions profiled (docs/profiling.md)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

from emulator.capture.ops import OpRecord, TensorMeta
from emulator.runtime.compile_cache import cached_graphs, read_ops, write_ops
from neurontools.contract.profile import NTFF_NAME, read_device_profile, read_graph, read_system_trace
from tests.support import run_tool


def test_profile_graph_runs_a_cached_graph_and_profiles_one_execution(daemon_factory, short_tmp: Path) -> None:
    daemon = daemon_factory("trn1.2xlarge")
    cache = short_tmp / "cache"
    env = {"NEURON_COMPILE_CACHE_URL": str(cache)}
    tiny = run_tool(["neuron-emulator", "run", "mlp", "--steps", "1"], daemon.address, timeout=120, **env)
    assert tiny.returncode == 0, tiny.stderr
    ((digest, module),) = cached_graphs(cache, "").items()
    assert read_ops(module)  # the cache keeps the graph's op records
    before = daemon.client.get("/snapshot")["retired"]["executions"]["completed"]
    out = short_tmp / "out"
    argv = ["neuron-emulator", "profile-graph", digest[:10], "--num-exec", "4", "--profile-nth-exec", "2"]
    done = run_tool([*argv, "--output-dir", str(out)], daemon.address, timeout=60, **env)
    assert done.returncode == 0, done.stderr
    assert f"execution 2 profiled in {out}" in done.stdout
    # the daemon counted its four executions like any runtime process's
    assert daemon.client.get("/snapshot")["retired"]["executions"]["completed"] == before + 4
    (directory,) = out.iterdir()
    graph = read_graph(directory / f"neff_{digest}.neff")
    (ntff,) = (p for p in directory.iterdir() if NTFF_NAME.match(p.name))
    header, (record,) = read_device_profile(ntff)
    assert header.graph_hash == digest and header.core == 0
    assert record.number == 2 and record.slow_factor == 1.0
    assert math.isclose(record.device_seconds, graph.compute_seconds, rel_tol=1e-12)
    for engine in graph.busy:
        table = sum(
            e - s for g, s, e in zip(graph.ops.engine, graph.ops.start, graph.ops.end, strict=True) if g == engine
        )
        assert math.isclose(record.engines[engine], table, rel_tol=1e-9, abs_tol=1e-15), engine
    events = read_system_trace(directory / "ntrace.jsonl")
    starts = [e.ts for e in events if e.kind == "nrt_execute"]
    assert len(starts) == 4
    assert all(math.isclose(b - a, graph.compute_seconds, rel_tol=1e-6) for a, b in itertools.pairwise(starts))
    # as a user: neuron-profile capture -n runs it; -s names the session file show-session reads
    session = short_tmp / "session" / "one.ntff"
    argv = ["neuron-profile", "capture", "-n", digest[:10], "-s", str(session), "-o", str(short_tmp / "out2")]
    captured = run_tool(argv, daemon.address, timeout=60, **env)
    assert captured.returncode == 0, captured.stderr
    shown = run_tool(["neuron-profile", "show-session", "-s", str(session)], None)
    assert shown.returncode == 0, shown.stderr
    assert f"UUID: {digest}" in shown.stdout


def test_profile_graph_errors_are_one_line(short_tmp: Path) -> None:
    cache = short_tmp / "cache"
    env = {"NEURON_COMPILE_CACHE_URL": str(cache)}
    unknown = run_tool(["neuron-emulator", "profile-graph", "abc123"], None, **env)
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == f"neuron-emulator: error: no graph 'abc123' in the compile cache at {cache}"
    bad = run_tool(["neuron-emulator", "profile-graph", "xyz"], None, **env)
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1
    past = run_tool(["neuron-emulator", "profile-graph", "ab", "--num-exec", "2", "--profile-nth-exec", "3"], None)
    assert past.returncode == 1 and "past --num-exec 2" in past.stderr
    module = cache / "neuronxcc-2.14.227.0" / ("MODULE_" + "ab" * 10 + "+0")  # a graph cached without ops
    module.mkdir(parents=True)
    (module / "model.json").write_text('{"graph_hash": "' + "ab" * 32 + '", "ops": 0, "model_code_bytes": 0}')
    (module / "model.done").touch()
    no_ops = run_tool(["neuron-emulator", "profile-graph", "abab"], None, **env)
    assert no_ops.returncode == 1 and "has no op records" in no_ops.stderr
    assert len(no_ops.stderr.strip().splitlines()) == 1
    # a replayable graph, but no daemon
    (module / "model.json").write_text('{"graph_hash": "' + "ab" * 32 + '", "ops": 1, "model_code_bytes": 0}')
    a, b = TensorMeta((64, 64), "float32", 64 * 64 * 4), TensorMeta((64, 64), "float32", 64 * 64 * 4)
    write_ops(module, [OpRecord("aten.mm", (a, b), (a,), 2 * 64**3)])
    gone = run_tool(["neuron-emulator", "profile-graph", "abab"], str(short_tmp / "no-daemon.sock"), **env)
    assert gone.returncode == 1 and "no Neuron emulator daemon" in gone.stderr
    assert len(gone.stderr.strip().splitlines()) == 1
