"""torch_xla's FSDP under ``neuron-emulator exec`` (docs/run-your-script.md §FSDP): real values and
collectives over torchrun's processes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_run_your_script import exec_run, losses, torchrun


def test_fsdp_trains_as_plain_data_parallelism_on_half_the_memory(daemon, short_tmp: Path) -> None:
    """Nested FSDP (the two larger layers wrapped by a size policy, the rest by the root) gives the
    losses of plain data parallelism with averaged gradients and the same clipping; each rank holds
    half the parameters and optimizer state; the sharded checkpoints consolidate into the model
    plain data parallelism trained, under its own parameter names."""
    runs = {}
    for fsdp in ("1", "0"):
        done = exec_run(daemon, torchrun("xla_fsdp_mlp.py", "--fsdp", fsdp, "--ckpt", str(short_tmp / "ckpt")))
        assert done.returncode == 0, done.stderr[-3000:]
        held = sorted(re.findall(r"rank (\d) parameters (\d+) optimizer-state elements (\d+)", done.stdout))
        assert len(held) == 2, done.stdout[-2000:]
        runs[fsdp] = (losses(done.stdout), held, done.stdout)
    (fl, fh, fout), (pl, ph, pout) = runs["1"], runs["0"]
    assert len(fl) == 4 and fl[-1] < fl[0] and fl == pytest.approx(pl, rel=1e-5)
    assert [(p, s) for _, p, s in ph] == [("1717", "3434")] * 2  # the whole MLP and AdamW's two moments
    assert [(p, s) for _, p, s in fh] == [("859", "1718")] * 2  # each rank's half (padded to even)
    keys, checksum = re.search(r"consolidated \[(.*)\] checksum (-?\d+\.\d+)", fout).groups()  # type: ignore[union-attr]
    assert keys == "'0.bias', '0.weight', '2.bias', '2.weight', '4.bias', '4.weight'"
    plain = float(re.search(r"plain checksum (-?\d+\.\d+)", pout).group(1))  # type: ignore[union-attr]
    assert float(checksum) == pytest.approx(plain, rel=1e-5)
    assert (short_tmp / "ckpt" / "consolidated.pth").is_file()
