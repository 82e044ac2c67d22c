"""`neuron-emulator run` end to end: real training through the daemon, as a user runs it."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support import run_tool, wait_until


def run(address: str, tmp: Path, *argv: str, timeout: float = 300):
    return run_tool(
        ["neuron-emulator", "run", *argv],
        address,
        timeout=timeout,
        NEURON_COMPILE_CACHE_URL=str(tmp / "neuron-compile-cache"),
    )


def test_mlp_learns_and_prints_plain_log_lines_when_not_a_terminal(daemon, short_tmp: Path) -> None:
    out = run(daemon.address, short_tmp, "mlp", "--steps", "30")
    assert out.returncode == 0, out.stderr
    assert "\x1b[" not in out.stdout  # no progress-bar escape codes in a pipe
    assert len(re.findall(r"^step +\d+/30 +loss [\d.]+ ", out.stdout, re.M)) >= 3
    first, final = map(float, re.search(r"loss +([\d.]+) \(step 1\) -> ([\d.]+) \(step 30\)", out.stdout).groups())
    assert final < 0.8 * first
    assert re.search(r"peak HBM/core +nc0 [\d.]+ GiB", out.stdout)
    assert wait_until(lambda: daemon.processes() == [], timeout=1.0)


def test_gpt3_6_7b_does_not_fit_a_trn1_2xlarge(daemon, short_tmp: Path) -> None:
    out = run(daemon.address, short_tmp, "gpt3-6.7b")  # its recipe's TP 8 needs more cores: one line saying so
    assert out.returncode == 1 and "published recipe" in out.stderr and out.stderr.count("\n") == 1
    out = run(daemon.address, short_tmp, "gpt3-6.7b", "--tp", "2")  # all the instance has
    assert out.returncode == 1
    assert "NRT_RESOURCE: Failed to allocate" in out.stderr and "16 GiB of HBM" in out.stderr
    assert "Traceback" not in out.stderr
    assert daemon.answers()
    assert wait_until(lambda: daemon.processes() == [], timeout=1.0)


def test_bert_large_model_scale_step_holds_its_real_hbm(daemon, short_tmp: Path) -> None:
    out = run(daemon.address, short_tmp, "bert-large", "--steps", "1", "--micro-batch", "16")
    assert out.returncode == 0, out.stderr
    assert "TP1xPP1xDP2" in out.stdout  # --dp fills the trn1.2xlarge's two cores
    peak = float(re.search(r"peak HBM/core +([\d.]+) GiB of 16 GiB", out.stdout).group(1))
    # bf16 weights + gradients + two AdamW moments = 4 x 2 bytes per parameter, plus activations
    assert peak * 2**30 >= 4 * 2 * 335_174_458
    assert peak < 16


def test_gpt_tiny_data_parallel_two_ranks(daemon, short_tmp: Path) -> None:
    out = run(daemon.address, short_tmp, "gpt-tiny", "--nproc", "2", "--steps", "6")
    assert out.returncode == 0, out.stderr
    assert "6 steps, 2 ranks" in out.stdout
    assert wait_until(lambda: daemon.processes() == [], timeout=2.0)


def test_bad_run_arguments_are_one_line(daemon, short_tmp: Path) -> None:
    for argv, text in (
        (["nosuch"], "nosuch"),
        (["mlp", "--steps", "0"], "--steps"),
        (["mlp", "--cores", "5"], "5"),
        (["gpt-tiny", "--seq-len", "100000"], "--seq-len"),
        (["mlp", "--nproc", "3"], "--nproc"),
    ):
        out = run(daemon.address, short_tmp, *argv)
        assert out.returncode != 0, argv
        errors = [ln for ln in out.stderr.splitlines() if "error" in ln.lower()]
        assert len(errors) == 1 and text in errors[0], (argv, out.stderr)
        assert "Traceback" not in out.stderr
