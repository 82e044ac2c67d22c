"""Property tests of what the tools read (docs/fuzzing.md): neuron-monitor configuration files,
neuron-monitor NDJSON streams, the runtime's environment and every CLI's flags. Many generated
examples in-process (deterministic: derandomized, no example database), then a few runs of the
real commands on the worst inputs."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.fuzz_inputs import CI_FUZZERS, base_reports, full_config, fuzz_report_stream
from tests.fuzz_support import FuzzStats
from tests.support import BIN, one_clear_line, run_tool, tool_env, wait_until


def fuzzed_cleanly(target: str, **options: Any) -> Any:
    """The fuzzer ``target`` of ``CI_FUZZERS`` run on its CI count of generated inputs: no failure,
    at least that many inputs tried; returns what the fuzzer returns."""
    fuzz, examples = CI_FUZZERS[target]
    stats = FuzzStats()
    result = fuzz(stats, examples, **options)
    print(stats.summary())
    assert not stats.failures, "\n".join(stats.failures[:10])
    assert stats.total >= examples
    return result


def test_monitor_config_files_parse_or_say_why_in_one_line() -> None:
    fuzzed_cleanly("neuron-monitor config")


def test_report_streams_skip_bad_lines_and_map_the_rest() -> None:
    samples = fuzzed_cleanly("NDJSON: neuron-top --source -")
    assert len(samples) > 100


def test_neuron_top_renders_whatever_a_stream_maps_to() -> None:
    """The samples of fuzzed reports on neuron-top's screen: every panel renders, on each tab."""
    import asyncio

    from neurontools.top.app import NeuronTopApp
    from neurontools.top.widgets.panel import TextPanel
    from tests.test_top import QueueFeed, until

    stats = FuzzStats()
    samples = fuzz_report_stream(stats, 20)
    assert not stats.failures, stats.failures[:5]
    assert len(samples) >= 40

    async def scenario() -> None:
        feed = QueueFeed()
        app = NeuronTopApp(feed, 0.01)
        async with app.run_test(size=(100, 40)) as pilot:
            for i, sample in enumerate(samples):
                expected = app.samples_applied + 1
                feed.queue.put(sample)
                await until(pilot, lambda expected=expected: app.samples_applied >= expected)
                if i % 8 == 0:  # the other views and the first process's tab, now and then
                    await pilot.press("2", "e", "f", "s", "x", "1")
                for panel in app.query(TextPanel):
                    panel.lines(panel.size.width or 100)
            await pilot.press("q")
        assert app.return_code == 0

    asyncio.run(scenario())


def test_neuron_monitor_prometheus_skips_bad_lines_one_line_each() -> None:
    fuzzed_cleanly("NDJSON: neuron-monitor-prometheus")


def test_lines_over_the_limit_are_skipped_without_being_held_whole() -> None:
    from neurontools.exporter.compat import CompatMetrics
    from neurontools.exporter.compat_cli import pump
    from neurontools.sources.report_stream import MAX_LINE_BYTES, ReportStream, StreamEnded, read_lines

    lines = list(read_lines(io.BytesIO(b"ab\n" + b"x" * 10 + b"\nyyyy\ncd"), limit=4))
    assert lines == [b"ab\n", None, b"yyyy\n", b"cd"]
    good = json.dumps(base_reports()[1]).encode()
    data = good + b"\n" + b"[" + b"1," * (MAX_LINE_BYTES // 2) + b"1]\n" + good + b"\n"
    stream = ReportStream(io.BytesIO(data))
    reports = [stream.next_report(10), stream.next_report(10)]
    assert all(isinstance(r, dict) for r in reports) and stream.bad_lines == 1
    assert stream.last_error == f"line longer than {MAX_LINE_BYTES} bytes"
    with pytest.raises(StreamEnded):
        stream.next_report(10)
    out = io.StringIO()
    assert pump(read_lines(io.BytesIO(data)), CompatMetrics(), out, io.StringIO()) == 2
    assert out.getvalue() == f"Unable to decode JSON line longer than {MAX_LINE_BYTES} bytes\n"


def test_labels_a_utf8_page_cannot_carry_are_replaced() -> None:
    """Found by scripts/fuzz.py: a report whose tag or instance id is a lone surrogate (legal in
    JSON as an escape) made every later scrape fail to encode."""
    from prometheus_client.exposition import generate_latest

    from neurontools.exporter.compat import CompatMetrics
    from neurontools.exporter.compat_cli import build_registry, pump

    report = base_reports()[0]
    report["instance_info"]["instance_id"] = "i-\udfff"
    report["neuron_runtime_data"][0]["neuron_runtime_tag"] = "\ud800job"
    report["neuron_runtime_data"][0]["report"]["execution_stats"]["error_summary"]["\udbff"] = 1
    metrics = CompatMetrics()
    registry = build_registry(metrics)
    assert pump([json.dumps(report).encode()], metrics, io.StringIO(), io.StringIO()) == 1
    page = generate_latest(registry).decode()
    assert 'runtime_tag="?job"' in page and 'instance_id="i-?"' in page


def test_core_selection_environment_gives_only_the_documented_errors() -> None:
    fuzzed_cleanly("core selection environment")


def test_neuron_cc_flags_give_only_the_documented_errors() -> None:
    fuzzed_cleanly("NEURON_CC_FLAGS")


@pytest.mark.parametrize(
    "tool",
    ["neuron-ls", "neuron-top", "neuron-monitor", "neuron-exporter", "neuron-monitor-prometheus", "neuron-emulator"],
)
def test_generated_command_lines_exit_cleanly_with_one_line(tool: str) -> None:
    fuzzed_cleanly("command lines", tools=[tool])


# -- the real commands, a few times each ---------------------------------------------------------------


WORST_LINES = [
    b"",
    b"{" + b'"a":' * 50_000,  # truncated and deep
    b"[" * 100_000,
    b'{"neuron_runtime_data": [{"pid": 1e999, "neuron_runtime_tag": 5, "report": {"neuroncore_counters": '
    b'{"neuroncores_in_use": {"99999999999999999999": {"neuroncore_utilization": 1' + b"0" * 400 + b"}}}}}]}",
    b"\xff\xfe\x00 not utf-8",
    b"x" * (3 << 20),  # a 3 MB line
    b'{"unknown": {"keys": [1, 2, 3]}, "instance_info": "wrong type"}',
    b"null",
]


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["neuron-ls", "--bogus"], 1),
        (["neuron-top", "--interval", "nan"], 1),
        (["neuron-monitor", "-c", "/nonexistent/monitor.json"], 1),
        (["neuron-exporter", "--port", "99999"], 1),
        (["neuron-monitor-prometheus", "--port", "²"], 2),
        (["neuron-emulator", "up", "--port", "0"], 1),
        (["neuron-emulator", "run", "gpt-tiny", "--steps", "²"], 1),
    ],
)
def test_real_commands_refuse_bad_flags_in_one_line(argv: list[str], code: int, short_tmp: Path) -> None:
    result = run_tool(argv, str(short_tmp / "missing" / "daemon.sock"), timeout=60)
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert one_clear_line(result.stderr or result.stdout), result.stderr


def test_real_neuron_monitor_rejects_generated_bad_config_files(short_tmp: Path) -> None:
    bad = {
        "deep.json": b"[" * 100_000,
        "utf8.json": b"\xff{}",
        "period.json": json.dumps({"period": "9" * 5000 + "s"}).encode(),
        "number.json": b'{"period": ' + b"9" * 5000 + b"}",  # found by scripts/fuzz.py: was a traceback
        "types.json": json.dumps({**full_config(), "neuron_runtimes": [{"metrics": [{"type": 1e999}]}]}).encode(),
    }
    for name, content in bad.items():
        (short_tmp / name).write_bytes(content)
        result = run_tool(["neuron-monitor", "-c", str(short_tmp / name)], None, timeout=30)
        assert result.returncode == 1 and one_clear_line(result.stderr), (name, result.stderr)
        assert result.stderr.startswith(f"neuron-monitor: error: {short_tmp / name}: ")


def test_real_neuron_monitor_prometheus_on_a_garbled_stream(short_tmp: Path) -> None:
    good = json.dumps(base_reports()[0]).encode()
    stream = b"\n".join([good, *WORST_LINES, good]) + b"\n"
    proc = subprocess.Popen(
        [str(BIN / "neuron-monitor-prometheus"), "-p", "0", "--bind", "127.0.0.1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=tool_env(None),
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        port = int(proc.stdout.readline().split()[-1])
        proc.stdin.write(stream)
        proc.stdin.close()
        lines = [proc.stdout.readline().decode() for _ in range(5)]  # the 5 non-blank bad lines
        assert all(line.startswith("Unable to decode JSON") for line in lines), lines
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            assert reply.status == 200 and b"neuroncore_utilization_ratio" in reply.read()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        finally:
            proc.kill()  # (no-op when it has exited)
            proc.wait()
    assert proc.returncode == 0
    assert proc.stderr is not None and b"Traceback" not in proc.stderr.read()


def test_real_neuron_top_on_a_garbled_stream_says_what_it_skipped(short_tmp: Path) -> None:
    good = json.dumps(base_reports()[0]).encode()
    (short_tmp / "in.ndjson").write_bytes(b"\n".join([good, *WORST_LINES, good]) + b"\n")
    tmux = ["tmux", "-S", str(short_tmp / "tmux.sock")]
    # Textual draws on stderr: the closing line is read from the terminal once the screen is gone
    top = f"{BIN / 'neuron-top'} --source - < {short_tmp / 'in.ndjson'}"
    command = f"export PATH={tool_env(None)['PATH']}; {top}; echo exit=$?; sleep 60"

    def pane() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p", "-t", "top"], capture_output=True, text=True).stdout

    try:
        subprocess.run([*tmux, "new-session", "-d", "-x", "160", "-y", "40", "-s", "top", command], check=True)
        assert wait_until(lambda: "end of neuron-monitor input" in pane(), 30), pane()
        assert "running on i-0123456789abcdef0" in pane()  # the last good report is shown
        subprocess.run([*tmux, "send-keys", "-t", "top", "q"], check=True)
        assert wait_until(lambda: "exit=" in pane(), 10), pane()
        text = pane()
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    assert "exit=0" in text and "Traceback" not in text, text
    said = [line for line in text.splitlines() if line.startswith("neuron-top:")]
    assert len(said) == 1 and "skipped 5 input lines that were not neuron-monitor reports" in said[0], text
