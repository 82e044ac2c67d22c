"""Built-in training workloads: models, data, the training loop and the ``run``/``workloads`` CLI.

Real-math workloads are trained here for real on plain CPU (no daemon) and must learn; the
model-scale ones are the zoo's, listed by the one registry (tests/test_model_zoo.py builds them).
End-to-end runs through the daemon and torchrun are the integration suite's job.
"""

from __future__ import annotations

import argparse
import io
import sys
from types import SimpleNamespace

import pytest
import torch

import emulator.xla as xm
from emulator.cli import bench, workloads
from emulator.cli import run as run_command
from emulator.cli.training import add_training_arguments, config_from_args, with_auto_cast, worker_argv
from emulator.workloads import MODEL_SCALE, REAL_MATH, WORKLOADS, get_workload
from emulator.workloads import data as wdata
from emulator.workloads.backend import CpuBackend, StepInfo
from emulator.workloads.hbm import HbmPeak, core_totals
from emulator.workloads.models.bert import IGNORE_INDEX
from emulator.workloads.progress import PlainLog, Quiet, log_interval
from emulator.workloads.runner import RunConfig, RunResult, run, train
from emulator.workloads.summary import summary_lines


# ------------------------------------------------------------------------------------------------
# helpers
class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def _cli() -> tuple[argparse.ArgumentParser, dict]:
    parser = _OneLineParser(prog="neuron-emulator")
    sub = parser.add_subparsers(dest="command", parser_class=_OneLineParser)
    handlers = {}
    for add in (run_command.add, workloads.add, bench.add):
        handlers.update(add(sub))
    return parser, handlers


def _invoke(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    parser, handlers = _cli()
    args = parser.parse_args(argv)
    code = handlers[args.command](args)
    out, err = capsys.readouterr()
    return code, out, err


def _train(name: str, **overrides: object) -> RunResult:
    config = RunConfig.defaults(get_workload(name), **overrides)
    return train(config, CpuBackend(), Quiet())


# ------------------------------------------------------------------------------------------------
# real math learns
def test_gpt_tiny_learns_on_stdlib_source() -> None:
    result = _train("gpt-tiny", steps=40, batch_size=8, seq_len=64)
    losses = result.losses
    assert len(losses) == 40
    assert losses[0] > 5.0  # ~ln(256): an untrained byte model
    assert losses[-1] < losses[0] - 1.5
    assert sum(losses[-5:]) / 5 < 0.7 * losses[0]


def test_bert_tiny_mlm_learns() -> None:
    result = _train("bert-tiny", steps=40, batch_size=8, seq_len=64)
    losses = result.losses
    assert losses[0] > 5.0  # ~ln(257)
    assert losses[-1] < losses[0] - 1.5
    assert sum(losses[-5:]) / 5 < 0.7 * losses[0]


def test_mlp_learns_teacher_labels() -> None:
    result = _train("mlp")
    losses = result.losses
    assert losses[0] > 2.0  # ~ln(10)
    assert losses[-1] < 0.5 * losses[0]


def test_bf16_training_still_learns() -> None:
    result = _train("mlp", dtype="bf16", steps=60)
    assert result.losses[-1] < 0.6 * result.losses[0]


def test_fp16_training_stays_finite() -> None:
    result = _train("mlp", dtype="fp16", steps=40)
    assert all(torch.isfinite(torch.tensor(result.losses)))
    assert result.losses[-1] < 0.6 * result.losses[0]


def test_training_is_deterministic() -> None:
    first = _train("gpt-tiny", steps=3, batch_size=4, seq_len=32).losses
    second = _train("gpt-tiny", steps=3, batch_size=4, seq_len=32).losses
    assert first == second


# ------------------------------------------------------------------------------------------------
# data
def test_stdlib_corpus_is_sorted_python_source() -> None:
    files = wdata.stdlib_files()
    assert files == sorted(files)
    assert all(f.suffix == ".py" for f in files)
    corpus = wdata.stdlib_corpus()
    assert corpus.dtype == torch.uint8 and corpus.numel() > 1_000_000
    assert b"def " in bytes(corpus[:200_000].tolist())


def test_causal_batches_shift_by_one_and_shard_by_rank() -> None:
    x, y = next(wdata.CausalLMBatches(4, 32, seed=1))
    assert x.shape == y.shape == (4, 32)
    assert torch.equal(x[:, 1:], y[:, :-1])
    again, _ = next(wdata.CausalLMBatches(4, 32, seed=1))
    assert torch.equal(x, again)
    r0 = wdata.CausalLMBatches(4, 32, seed=1, rank=0, world_size=2)
    r1 = wdata.CausalLMBatches(4, 32, seed=1, rank=1, world_size=2)
    assert r0.text.numel() == r1.text.numel()
    assert r0.text.data_ptr() != r1.text.data_ptr()
    assert not torch.equal(next(r0)[0], next(r1)[0])


def test_mlm_masking_80_10_10() -> None:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 200, (64, 512), generator=gen)
    inputs, labels = wdata.mask_tokens(ids, gen)
    chosen = labels != IGNORE_INDEX
    rate = chosen.float().mean().item()
    assert 0.14 < rate < 0.16
    assert torch.equal(labels[chosen], ids[chosen])
    assert torch.equal(inputs[~chosen], ids[~chosen])
    masked = (inputs == wdata.MASK_ID) & chosen
    assert 0.78 < masked.sum().item() / chosen.sum().item() < 0.82
    kept = (inputs == ids) & chosen
    assert 0.08 < kept.sum().item() / chosen.sum().item() < 0.12  # 10 % kept (+ random hits of the same id)


def test_teacher_labels_are_consistent_across_ranks() -> None:
    a = wdata.TeacherBatches(16, 32, 10, seed=3, rank=0, world_size=2)
    b = wdata.TeacherBatches(16, 32, 10, seed=3, rank=1, world_size=2)
    xa, ya = next(a)
    xb, _ = next(b)
    assert not torch.equal(xa, xb)
    assert torch.equal(b.labels(xa), ya)  # same teacher on every rank
    assert ya.unique().numel() > 3


# ------------------------------------------------------------------------------------------------
# runner: errors, progress, summary
class _OutOfMemoryBackend(CpuBackend):
    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        raise xm.NeuronRuntimeError("NRT_RESOURCE", "Failed to allocate 26.000GB on ND 0 NC 0 (usage: tensors)")


def test_runtime_error_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    config = RunConfig.defaults(get_workload("mlp"), steps=2)
    code = run(config, backend=_OutOfMemoryBackend(), reporter=Quiet())
    err = capsys.readouterr().err
    assert code == 1
    assert err.splitlines() == [
        "neuron-emulator: error: NRT_RESOURCE: Failed to allocate 26.000GB on ND 0 NC 0 (usage: tensors)"
    ]


def test_plain_log_every_few_steps_and_summary() -> None:
    out = io.StringIO()
    config = RunConfig.defaults(get_workload("mlp"), steps=20)
    result = train(config, CpuBackend(), PlainLog(out))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("mlp (real math): 76,810 parameters, batch 256 per rank, 1 rank, fp32")
    steps = [ln for ln in lines if ln.startswith("step ")]
    assert [ln.split()[1] for ln in steps] == [f"{s}/20" for s in (1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20)]
    assert all("loss " in ln and " samples/s " in ln and "/step (wall)" in ln for ln in steps)
    assert lines[len(steps) + 1].startswith("mlp: 20 steps, 1 rank")
    summary = "\n".join(lines[len(steps) + 1 :])
    assert f"{result.first_loss:.4f} (step 1) -> {result.final_loss:.4f} (step 20)" in summary
    assert "from host wall time, steps 2-20" in summary
    assert "peak HBM/core    n/a" in summary


def test_log_interval() -> None:
    assert [log_interval(n) for n in (1, 5, 20, 100, 5000)] == [1, 1, 2, 10, 10]


def test_summary_prefers_simulated_time_and_skips_compiling_steps() -> None:
    from emulator.workloads.runner import RunHeader, StepStats

    header = RunHeader("gpt-tiny", REAL_MATH, 822_528, 3, 16, 128, "bf16", 1e-4, 2, (0,), "seq")
    steps = [
        StepStats(1, None, 9.0, 32, StepInfo(device_seconds=0.5, flops=10**12, compiled=True, outcome="completed")),
        StepStats(2, None, 0.6, 32, StepInfo(device_seconds=0.25, flops=10**12, compiled=False, outcome="completed")),
        StepStats(3, None, 0.6, 32, StepInfo(device_seconds=0.25, flops=10**12, compiled=False, outcome="completed")),
    ]
    result = RunResult(header, steps, 10.2, {0: 5 << 30}, "")
    text = "\n".join(summary_lines(result))
    assert "128.0 seq/s simulated, steps 2-3" in text  # 2 ranks x 16 / 0.25 s
    assert "graphs compiled  1 (step 1)" in text
    assert "nc0 5.00 GiB" in text
    assert not any(ln.split()[0] == "loss" for ln in text.splitlines()[1:])  # no loss was read


def test_hbm_peak_from_daemon_memory() -> None:
    answers = iter(
        [
            {"cores": {"0": {"constants": 10, "tensors": 5}, "1": {"tensors": 1}}},  # GET /processes/1/memory
            {"cores": {"0": {"constants": 10, "tensors": 2}, "1": {"tensors": 7}}},
        ]
    )
    client = SimpleNamespace(get=lambda path: next(answers))
    peak = HbmPeak(client, pid=1)  # type: ignore[arg-type]
    peak.sample()
    peak.sample()
    assert peak.peak() == {0: 15, 1: 7}
    assert core_totals({"pid": 1, "neuroncores": [0]}) is None
    assert core_totals({"memory": {"cores": {"0": {"tensors": 5, "constants": 3, "peak": 20}}}}) == {0: 20}
    none = HbmPeak(SimpleNamespace(get=lambda path: {}), pid=1)  # type: ignore[arg-type]
    none.sample()
    assert none.peak() is None and "does not report" in none.reason


# ------------------------------------------------------------------------------------------------
# CLI
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "gpt-huge"], "unknown workload 'gpt-huge'"),
        (["run", "gpt-tiny", "--steps", "0"], "--steps '0': expected a positive integer"),
        (["run", "gpt-tiny", "--steps", "ten"], "--steps 'ten': expected a positive integer"),
        (["run", "gpt-tiny", "--steps=-3"], "--steps '-3': expected a positive integer"),
        (["run", "gpt-tiny", "--batch-size", "1.5"], "--batch-size '1.5': expected a positive integer"),
        (["run", "gpt-tiny", "--seq-len", "4096"], "--seq-len 4096: workload gpt-tiny accepts at most 256"),
        (["run", "mlp", "--seq-len", "16"], "workload mlp has no sequence dimension"),
        (["run", "gpt-tiny", "--dtype", "fp8"], "--dtype 'fp8': expected one of fp32, bf16, fp16"),
        (["run", "gpt-tiny", "--lr", "-1"], "--lr '-1': expected a positive number"),
        (["run", "gpt-tiny", "--lr", "nan"], "--lr 'nan': expected a positive number"),
        (["run", "gpt-tiny", "--auto-cast", "some"], "--auto-cast 'some': expected one of none, matmult, all"),
        (["run", "gpt-tiny", "--cores", "3-1"], "range 3-1 goes backwards"),
        (["run", "gpt-tiny", "--cores", "0,2"], "cores must be contiguous"),
        (["run", "gpt-tiny", "--cores", "x"], "--cores='x'"),
        (["run", "gpt-tiny", "--nproc", "0"], "--nproc '0': expected a positive integer"),
        (["run", "gpt-tiny", "--cores", "0", "--nproc", "2"], "needs one per process"),
    ],
)
def test_run_bad_input_is_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _invoke(argv, capsys)
    assert code == 1
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("neuron-emulator: error: ")
    assert message in lines[0]


def test_run_without_daemon_is_one_line(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NEURON_EMULATOR_ADDR", str(tmp_path / "none.sock"))
    code, out, err = _invoke(["run", "mlp", "--steps", "2"], capsys)
    assert code == 1 and out == ""
    assert len(err.splitlines()) == 1
    assert "no Neuron emulator daemon" in err


def test_workloads_lists_every_workload(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _invoke(["workloads"], capsys)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "KIND", "DEFAULTS", "DESCRIPTION"]
    names = [ln.split()[0] for ln in lines[1:]]
    from emulator.workloads.models.zoo import MODELS

    # the real-math workloads, then every model-scale model of the zoo (parallel jobs)
    assert names == ["gpt-tiny", "bert-tiny", "mlp", *MODELS] == list(WORKLOADS)
    assert {"bert-large", "gpt3-6.7b", "gpt3-175b", "llama2-70b", "llama3.1-8b", "vit-base"} <= set(MODELS)
    kinds = {ln.split()[0]: ln.split()[1:3] for ln in lines[1:]}
    assert kinds["gpt-tiny"] == REAL_MATH.split() and kinds["llama2-7b"] == MODEL_SCALE.split()
    assert WORKLOADS["gpt-tiny"].kind == REAL_MATH


def test_worker_flags_reproduce_the_config() -> None:
    parser, _ = _cli()
    args = parser.parse_args(["run", "bert-tiny", "--steps", "7", "--seq-len", "96", "--dtype", "bf16", "--lr", "3e-4"])
    config = config_from_args(args)
    worker = argparse.ArgumentParser()
    add_training_arguments(worker)
    assert config_from_args(worker.parse_args(worker_argv(config))) == config
    assert (config.steps, config.batch_size, config.seq_len, config.dtype, config.lr) == (7, 16, 96, "bf16", 3e-4)


def test_auto_cast_replaces_the_compiler_flag() -> None:
    assert with_auto_cast("", "matmult") == "--auto-cast matmult"
    assert with_auto_cast("--model-type=transformer --auto-cast all", "none") == (
        "--model-type=transformer --auto-cast none"
    )
    assert with_auto_cast("--auto-cast=all -O1", "matmult") == "-O1 --auto-cast matmult"


def test_workload_registry_is_torch_free() -> None:
    import subprocess

    code = "import sys, emulator.workloads, emulator.cli, emulator.cli.run; emulator.cli.build_parser(); "
    code += "sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_launcher_passes_each_worker_error_once(capsys: pytest.CaptureFixture[str]) -> None:
    from emulator.workloads.launch import _Output, torchrun_argv

    stream = io.StringIO(
        "W1122 torch.distributed.run: Setting OMP_NUM_THREADS environment variable for each process\n"
        'neuron-emulator: error-json: "NRT_RESOURCE: Failed to allocate\\n  * total: 15.844GB"\n'
        'neuron-emulator: error-json: "NRT_RESOURCE: Failed to allocate\\n  * total: 15.844GB"\n'
        "neuron-emulator: error: --steps '0': expected a positive integer\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
    )
    out = _Output()
    out.pump(stream)
    assert capsys.readouterr().err == (
        "neuron-emulator: error: NRT_RESOURCE: Failed to allocate\n  * total: 15.844GB\n"
        "neuron-emulator: error: --steps '0': expected a positive integer\n"
    )
    assert len(out.held) == 5 and out.errors_passed()
    argv = torchrun_argv(2, ["mlp", "--steps", "3"])
    assert argv[-8:] == [
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "emulator.cli.worker",
        "mlp",
        "--steps",
        "3",
    ]


def test_worker_errors_are_json_lines(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from emulator.workloads.errors import FORMAT_ENV, decode_error_line, report_error

    report_error("a\nb")
    assert capsys.readouterr().err == "neuron-emulator: error: a\nb\n"
    monkeypatch.setenv(FORMAT_ENV, "json")
    report_error("a\nb")
    line = capsys.readouterr().err
    assert line.count("\n") == 1
    assert decode_error_line(line.rstrip("\n")) == "a\nb"
