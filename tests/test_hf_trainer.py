"""Mixed precision and the Hugging Face ``Trainer`` on ``xla`` under ``neuron-emulator exec``
(docs/run-your-script.md §Hugging Face Trainer, §Autocast): the Trainer's torch_xla and
accelerate code paths, data parallel over torchrun; torch_xla's autocast."""

from __future__ import annotations

import re

from tests.test_run_your_script import SAMPLES, exec_run, torchrun


def test_trainer_trains_data_parallel_on_xla(daemon) -> None:
    done = exec_run(daemon, torchrun("hf_trainer_xla.py", "--output_dir", "out", "--max_steps", "6"), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [float(x) for x in re.findall(r"step \d+ loss (\d+\.\d+)", done.stdout)]
    assert len(steps) == 6 and steps[-1] < steps[0], done.stdout[-2000:]
    ranks = re.findall(r"rank (\d) of (\d) on (\S+) weights (-?\d+\.\d+)", done.stdout)
    assert sorted(r for r, *_ in ranks) == ["0", "1"] and {w for *_, w in ranks} == {ranks[0][3]}, ranks
    assert {(n, dev) for _, n, dev, _ in ranks} == {("2", "xla:0")}  # each rank on its own NeuronCore


def test_torch_xla_autocast_runs_matmuls_in_bf16_and_softmax_in_fp32(daemon) -> None:
    """``torch_xla.amp.autocast`` (docs/run-your-script.md §Autocast): the native backend's
    AutocastXLA policy casts the linear layers to BF16, runs softmax and the loss in FP32; the
    weights stay FP32; the model trains."""
    done = exec_run(daemon, ["python", str(SAMPLES / "autocast_mlp.py"), "--steps", "20"])
    assert done.returncode == 0, done.stderr[-3000:]
    first, last = (float(x) for x in re.findall(r"step \d+ loss (\d+\.\d+)", done.stdout))
    assert last < 0.5 * first
    assert "dtypes logits torch.bfloat16 softmax torch.float32 loss torch.float32 weight torch.float32" in done.stdout
