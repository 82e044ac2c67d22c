"""Unmodified torch-neuronx training scripts under ``neuron-emulator exec`` (docs/run-your-script.md).

The scripts in tests/samples/ import torch_xla, torch_neuronx and neuronx_distributed as on a
Trn1; only the launch command differs. Each must train (its loss falls), and neuron-ls and
neuron-monitor must show it as on a Trn1: one process per NeuronCore, the shard of a
tensor-parallel model in each core's device memory.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import BIN, reap, run_tool, tool_env, wait_until

SAMPLES = Path(__file__).parent / "samples"
FAST = {"OMP_NUM_THREADS": "1"}


def exec_run(daemon, argv: list[str], *, timeout: float = 240, cwd: Path | None = None, **env: str):
    return subprocess.run(
        [str(BIN / "neuron-emulator"), "exec", "--", *argv],
        env=tool_env(daemon.address, {**FAST, **env}),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )


def exec_start(daemon, argv: list[str], out: Path, *, cwd: Path | None = None, **env: str) -> subprocess.Popen:
    with open(out, "w") as fh:
        return subprocess.Popen(
            [str(BIN / "neuron-emulator"), "exec", "--", *argv],
            env=tool_env(daemon.address, {**FAST, **env}),
            stdout=fh,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
        )


def torchrun(script: str, *args: str, nproc: int = 2) -> list[str]:
    return ["torchrun", "--standalone", f"--nproc_per_node={nproc}", str(SAMPLES / script), *args]


def losses(text: str) -> list[float]:
    return [float(m) for m in re.findall(r"loss (\d+\.\d+)", text)]


def monitor_report(daemon, want) -> dict | None:
    """The first neuron-monitor report (within 15 s) for which ``want(report)`` holds."""
    proc = subprocess.Popen(
        [str(BIN / "neuron-monitor")],
        env=tool_env(daemon.address),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + 15
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                return None
            report = json.loads(line)
            if want(report):
                return report
        return None
    finally:
        proc.kill()
        proc.wait()


def neuron_top_screen(daemon, tmp: Path, ready) -> str:
    """neuron-top's screen in tmux, once ``ready(screen)`` holds (or after 20 s)."""
    tmux = ["tmux", "-S", str(tmp / "tmux.sock")]
    env = tool_env(daemon.address)
    command = f"exec env NEURON_EMULATOR_ADDR={daemon.address} PATH={env['PATH']} {BIN / 'neuron-top'}"
    subprocess.run([*tmux, "new-session", "-d", "-x", "160", "-y", "40", "-s", "top", command], check=True)

    def pane() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p", "-t", "top"], capture_output=True, text=True).stdout

    try:
        wait_until(lambda: ready(pane()), 20, 0.2)
        return pane()
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def ls_processes(daemon) -> list[dict]:
    done = run_tool(["neuron-ls", "-j"], daemon.address)
    assert done.returncode == 0, done.stderr
    return [p for device in json.loads(done.stdout) for p in device.get("neuron_processes", [])]


# -- the samples ----------------------------------------------------------------------------------
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (CI installs it)")
def test_torchrun_mlp_trains_on_two_cores_and_the_tools_show_it(daemon, short_tmp: Path) -> None:
    out = short_tmp / "out.txt"
    # it trains until the test has seen it (the cue file): never a race with the job's end
    cue = short_tmp / "seen"
    proc = exec_start(daemon, torchrun("mlp_torchrun.py", "--epochs", "2", "--train_until", str(cue)), out)
    try:
        assert wait_until(lambda: len(ls_processes(daemon)) == 2 or proc.poll() is not None, 120, 0.5), out.read_text()
        held = ls_processes(daemon)
        assert len(held) == 2 and all(p["neuron_runtime_version"] for p in held)
        pids = {p["pid"] for p in held}

        def both_cores_busy(report: dict) -> bool:
            runtimes = [r for r in report.get("neuron_runtime_data", []) if r["pid"] in pids]
            cores = {}
            for r in runtimes:
                cores.update(r["report"].get("neuroncore_counters", {}).get("neuroncores_in_use", {}))
            return sorted(cores) == ["0", "1"] and all(c["neuroncore_utilization"] > 0 for c in cores.values())

        assert monitor_report(daemon, both_cores_busy) is not None, out.read_text()[-3000:]
        screen = neuron_top_screen(daemon, short_tmp, lambda s: all(f":{pid}" in s for pid in pids))
        assert all(f":{pid}" in screen for pid in pids), screen  # a tab per process (its tag: the PID)
        cue.touch()
        assert proc.wait(timeout=180) == 0, out.read_text()[-3000:]
    finally:
        reap(proc)
    text = out.read_text()
    assert text.count("accuracy ") == 1, text[-2000:]  # master_print: rank 0 only
    seen = losses(text)
    assert len(seen) >= 6 and seen[-1] < seen[0], seen
    accuracy = float(re.search(r"accuracy (\d\.\d+) world 2", text).group(1))  # type: ignore[union-attr]
    assert accuracy > 0.5  # 10 classes: chance is 0.1
    assert wait_until(lambda: daemon.processes() == [], 5)
    # the gradient all-reduces of both ranks were counted with their modelled time; the two cores
    # of a trn1.2xlarge share one chip, so their ring put no byte on a NeuronLink (docs/collectives.md)
    link = daemon.client.get("/snapshot")["retired"]["collectives"]["neuronlink"]
    assert link["seconds"] > 0 and link["bytes"] == 0


def test_xmp_spawn_starts_one_process_per_core(daemon) -> None:
    done = exec_run(daemon, ["python", str(SAMPLES / "mlp_xmp_spawn.py"), "--steps", "30"])
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("index "))
    assert "ordinal 0 local 0 world 2" in line  # trn1.2xlarge: two NeuronCores, two processes
    first, last = (float(x) for x in re.findall(r"loss (\d+\.\d+)", line))
    assert last < first / 5
    assert wait_until(lambda: daemon.processes() == [], 5)


def test_hugging_face_causal_lm_trains_and_saves_with_xm_save(daemon, short_tmp: Path) -> None:
    done = exec_run(daemon, torchrun("hf_causal_lm.py", "--steps", "30", "--output_dir", str(short_tmp / "ckpt")))
    assert done.returncode == 0, done.stderr[-3000:]
    seen = losses(done.stdout)
    assert len(seen) >= 5 and seen[-1] < seen[0] - 1.0, seen
    state = __import__("torch").load(short_tmp / "ckpt" / "model.pt")
    assert "transformer.wte.weight" in state and state["transformer.wte.weight"].device.type == "cpu"


def _tp_result(text: str) -> dict:
    return json.loads(next(ln for ln in text.splitlines() if ln.startswith("{")))


def test_nxd_tensor_parallel_holds_its_shard_in_each_cores_memory(daemon, short_tmp: Path) -> None:
    out = short_tmp / "tp.txt"
    ckpt = short_tmp / "ckpt"
    cue = short_tmp / "seen"  # it stays attached after training until the test has seen it
    argv = torchrun("nxd_tp_mlp.py", "--tensor_parallel_size", "2", "--stay_until", str(cue), "--output_dir", str(ckpt))
    proc = exec_start(daemon, argv, out)
    try:
        assert wait_until(lambda: '"tp_size"' in out.read_text() or proc.poll() is not None, 180, 0.5), out.read_text()
        result = _tp_result(out.read_text())
        pids = {p["pid"] for p in ls_processes(daemon)}
        assert len(pids) == 2

        def constants_by_core(report: dict) -> dict[str, int]:
            found = {}
            for r in report.get("neuron_runtime_data", []):
                if r["pid"] in pids:
                    usage = r["report"]["memory_used"]["neuron_runtime_used_bytes"]["usage_breakdown"]
                    for core, kinds in usage["neuroncore_memory_usage"].items():
                        found[core] = kinds["constants"]
            return found

        report = monitor_report(daemon, lambda r: len(constants_by_core(r)) == 2)
        assert report is not None
        # each core holds exactly its process's parameters: the shard, not the whole model
        assert constants_by_core(report) == {"0": result["param_bytes"], "1": result["param_bytes"]}
        cue.touch()
        assert proc.wait(timeout=60) == 0, out.read_text()[-3000:]
    finally:
        reap(proc)
    assert result["tp_size"] == 2 and result["dp_size"] == 1 and result["tensor_parallel"]
    hidden, vocab = 256, 1024
    assert result["shapes"]["up.weight"] == [4 * hidden // 2, hidden]
    assert result["shapes"]["down.weight"] == [hidden, 4 * hidden // 2]
    assert result["shapes"]["embed.weight"] == [vocab // 2, hidden]
    # fp32 bytes of the unsharded model: embedding and head, the MLP's two weights, its biases
    full = 4 * (2 * vocab * hidden + 2 * 4 * hidden * hidden + 4 * hidden + hidden)
    assert result["param_bytes"] == pytest.approx(full / 2, rel=0.01)  # half per rank (the output bias is whole)
    assert result["last_loss"] < result["first_loss"] / 2
    # neuronx-distributed's sharded checkpoint: one file per tensor-parallel rank, holding its shard
    for rank in (0, 1):
        state = __import__("torch").load(ckpt / f"tp_rank_{rank:02d}_pp_rank_00" / "checkpoint.pt")
        assert list(state["model"]["up.weight"].shape) == [4 * hidden // 2, hidden]


def test_tensor_parallel_model_computes_what_the_unsharded_one_does(daemon) -> None:
    # no biases (neuronx-distributed draws those per rank): the weights are slices of the same
    # full weights, so TP2 and TP1 give the same first loss and the same loss after updates
    runs = {}
    for nproc in (1, 2):
        done = exec_run(
            daemon, torchrun("nxd_tp_mlp.py", "--tensor_parallel_size", "2", "--bias", "0", "--steps", "3", nproc=nproc)
        )
        assert done.returncode == 0, done.stderr[-3000:]
        runs[nproc] = _tp_result(done.stdout)
    assert runs[1]["tp_size"] == 1 and runs[2]["tp_size"] == 2
    assert runs[2]["first_loss"] == pytest.approx(runs[1]["first_loss"], rel=1e-5)
    assert runs[2]["last_loss"] == pytest.approx(runs[1]["last_loss"], rel=1e-3)


def test_zero1_trains_as_plain_data_parallelism_with_half_the_optimizer_state(daemon) -> None:
    runs = {}
    for zero1 in ("1", "0"):
        done = exec_run(daemon, torchrun("zero1_mlp_torchrun.py", "--zero1", zero1, "--steps", "4"))
        assert done.returncode == 0, done.stderr[-3000:]
        ranks = re.findall(r"rank (\d) weights (-?\d+\.\d+) optimizer-state elements (\d+)", done.stdout)
        assert len(ranks) == 2, done.stdout[-2000:]
        runs[zero1] = (losses(done.stdout), [float(w) for _, w, _ in ranks], [int(n) for _, _, n in ranks])
    (zl, zw, zn), (pl, pw, pn) = runs["1"], runs["0"]
    assert len(zl) == 4 and zl[-1] < zl[0] and zl == pytest.approx(pl, rel=1e-5)
    assert zw[0] == zw[1] == pytest.approx(pw[0], rel=1e-5)  # every replica gathered the same update
    assert pn == [1190, 1190]  # AdamW's two moments of the 595 parameters
    assert zn == [646, 646]  # each rank's half, dim 0 padded to a multiple of 2


def test_neuron_parallel_compile_fills_the_cache_for_the_next_run(daemon, short_tmp: Path) -> None:
    cache = short_tmp / "cache"
    command = torchrun("nxd_tp_mlp.py", "--steps", "3")
    done = exec_run(daemon, ["neuron_parallel_compile", *command], NEURON_COMPILE_CACHE_URL=str(cache))
    assert done.returncode == 0, done.stderr[-3000:]
    graphs = int(re.search(r"Total graphs: (\d+)", done.stderr).group(1))  # type: ignore[union-attr]
    assert graphs >= 1
    assert "Total failed compilations: 0" in done.stderr
    assert "No compilation was done" in done.stderr and "Compiling graph" not in done.stderr
    assert len(list(cache.glob("neuronxcc-*/MODULE_*/model.done"))) == graphs
    again = exec_run(daemon, command, NEURON_COMPILE_CACHE_URL=str(cache))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Using a cached neff" in again.stderr and "Compiling graph" not in again.stderr


# -- honest gaps and the command itself ----------------------------------------------------------
def test_a_name_not_emulated_says_so(daemon) -> None:
    code = "import torch_xla.core.xla_model as xm\nxm.collective_permute"
    done = exec_run(daemon, ["python", "-c", code])
    assert done.returncode == 1
    assert (
        "NotEmulatedError: torch_xla.core.xla_model.collective_permute is not emulated by neuron-emulator"
        in done.stderr
    )
    done = exec_run(daemon, ["python", "-c", "from neuronx_distributed.pipeline import NxDPPModel"])
    assert done.returncode == 1 and "ModuleNotFoundError" in done.stderr  # a module that is not there at all
    done = exec_run(daemon, ["python", "-c", "import neuronx_distributed as nxd\nnxd.NxDPPModel"])
    assert "neuronx_distributed.NxDPPModel is not emulated" in done.stderr
    code = (
        "import torch_xla.amp.syncfree as sf\nfrom torch_xla.amp.syncfree.adamw import AdamW\n"
        "assert sf.AdamW is AdamW and sf.adam.Adam is sf.Adam and sf.sgd.SGD is sf.SGD\n"
        "import torch_xla\ntorch_xla.amp.GradScaler"
    )
    done = exec_run(daemon, ["python", "-c", code])  # the sync-free optimizers are there, the scaler is not
    assert done.returncode == 1 and "torch_xla.amp.GradScaler is not emulated" in done.stderr, done.stderr[-2000:]


def test_the_helpers_the_bert_sample_imports_work(daemon) -> None:
    code = """
import torch, torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.utils.utils as xu
import torch_xla.test.test_utils as test_utils
device = xm.xla_device()
w = torch.ones(4, device=device)

@torch_xla.compile
def train_step(x):
    return (w * x).sum()

loader = xu.SampleGenerator(torch.full((4,), 2.0), 3)
total = sum(train_step(batch.to(device)).item() for batch in loader)
assert len(loader) == 3 and total == 24.0 and xu.as_list(5) == [5]
assert xu.getenv_as("NOT_SET_ANYWHERE", int, 7) == 7
test_utils.print_training_update(device, 3, torch.tensor(0.5), 10.0, 9.0, epoch=1)
assert test_utils.get_summary_writer(None) is None
test_utils.write_to_summary(None, 3, {"loss": 0.5})
assert xm._maybe_convert_to_cpu({"w": [w]})["w"][0].device.type == "cpu"
import libneuronxla
asked = []
libneuronxla.register_hlo_snapshot_callback(lambda name, index, count: asked.append(count) or "")
xm.mark_step()
assert asked, "the callback is asked after each step graph"
libneuronxla.register_hlo_snapshot_callback(lambda name, index, count: "inputs outputs")
try:
    xm.mark_step()
    raise SystemExit("a snapshot was asked for and nothing said it cannot be taken")
except NotImplementedError as exc:
    assert "libneuronxla HLO snapshots is not emulated" in str(exc), exc
"""
    done = exec_run(daemon, ["python", "-c", code])
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"\| Training Device=\S+ Epoch=1 Step=3 Loss=0\.50000 Rate=10\.00 GlobalRate=9\.00", done.stdout)


def test_shims_are_on_no_path_outside_exec() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib.util as u; print(u.find_spec('torch_xla'), u.find_spec('neuronx_distributed'))",
        ],
        capture_output=True,
        text=True,
        env=tool_env(None),
        timeout=60,
    )
    assert done.stdout.strip() == "None None"


def test_exec_errors_are_one_line(daemon, short_tmp: Path) -> None:
    missing = run_tool(["neuron-emulator", "exec", "--", "no-such-command-xyz"], daemon.address)
    assert missing.returncode == 127 and missing.stderr.strip().count("\n") == 0
    assert "no-such-command-xyz: command not found" in missing.stderr
    nothing = run_tool(["neuron-emulator", "exec"], daemon.address)
    assert nothing.returncode == 2 and "give the command to run" in nothing.stderr
    absent = run_tool(["neuron-emulator", "exec", "--", "true"], str(short_tmp / "absent.sock"))
    assert absent.returncode == 1 and "neuron-emulator up" in absent.stderr and "Traceback" not in absent.stderr
    ok = run_tool(["neuron-emulator", "exec", "--", "sh", "-c", "exit 7"], daemon.address)
    assert ok.returncode == 7  # the command's own status


# -- pieces, in process --------------------------------------------------------------------------
def test_neuronx_distributed_rank_layout() -> None:
    """neuronx-distributed's [PP, DP, TP] row-major grid is the rank grid of order tp-dp-pp."""
    from emulator.parallel.ranks import RankGrid

    grid = RankGrid.for_world(8, tp=2, pp=1)
    assert grid.groups("tp") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert grid.groups("dp") == [[0, 2, 4, 6], [1, 3, 5, 7]]
    grid = RankGrid.for_world(32, tp=8, pp=4)
    assert grid.dp == 1 and grid.groups("pp")[:2] == [[0, 8, 16, 24], [1, 9, 17, 25]]
    assert grid.groups("tp")[1] == list(range(8, 16))
    with pytest.raises(ValueError, match="not divisible"):
        RankGrid.for_world(6, tp=4, pp=1)


def test_gaps_raise_named_errors_but_private_names_stay_attribute_errors() -> None:
    from emulator.compat.gaps import NotEmulatedError, not_emulated, refuse

    missing = not_emulated("torch_xla.core.xla_model")
    with pytest.raises(NotEmulatedError, match=r"torch_xla\.core\.xla_model\.all_to_all is not emulated"):
        missing("all_to_all")
    with pytest.raises(AttributeError):
        missing("__path__")
    with pytest.raises(NotEmulatedError, match=r"torch_neuronx\.trace is not emulated by neuron-emulator: inference"):
        refuse("torch_neuronx.trace", "inference")()


@pytest.mark.parametrize("name", ["Adam", "AdamW", "SGD"])
def test_syncfree_optimizers_step_as_pytorchs_unless_an_overflow_was_found(name: str) -> None:
    import torch

    from emulator.compat import syncfree

    torch.manual_seed(0)
    ours, ref = torch.nn.Linear(8, 4), torch.nn.Linear(8, 4)
    ref.load_state_dict(ours.state_dict())
    mine = getattr(syncfree, name)(ours.parameters(), lr=1e-2)
    theirs = getattr(torch.optim, name)(ref.parameters(), lr=1e-2)
    x = torch.randn(16, 8)
    for found in (0.0, 0.0, 1.0, 0.0):
        for model, opt in ((ours, mine), (ref, theirs)):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
        before = [p.detach().clone() for p in ours.parameters()]
        mine.step(found_inf=torch.tensor(found))
        if found:  # skipped: the parameters stay, and so does the reference
            assert all(torch.equal(a, b) for a, b in zip(before, ours.parameters(), strict=True))
            continue
        theirs.step()
        for a, b in zip(ours.parameters(), ref.parameters(), strict=True):
            assert torch.equal(a, b)


def test_adamw_fp32_optim_params_is_adamw_with_fp32_state() -> None:
    import torch

    from emulator.compat.nxd_optim import AdamW_FP32OptimParams

    torch.manual_seed(0)
    ours, ref = torch.nn.Linear(8, 4), torch.nn.Linear(8, 4)
    ref.load_state_dict(ours.state_dict())
    mine = AdamW_FP32OptimParams(ours.parameters(), lr=1e-2, eps=1e-12)
    theirs = torch.optim.AdamW(ref.parameters(), lr=1e-2, eps=1e-12, weight_decay=0.0)
    x = torch.randn(16, 8)
    for _ in range(5):
        for model, opt in ((ours, mine), (ref, theirs)):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
    for a, b in zip(ours.parameters(), ref.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    half = torch.nn.Linear(8, 4).to(torch.bfloat16)
    opt = AdamW_FP32OptimParams(half.parameters())
    half(x.to(torch.bfloat16)).float().square().mean().backward()
    opt.step()
    assert all(s["exp_avg"].dtype == torch.float32 for s in opt.state.values())
    assert half.weight.dtype == torch.bfloat16


def test_xla_process_group_reduces_each_tensor_of_a_coalesced_call_on_its_own() -> None:
    import datetime

    import torch
    import torch.distributed as dist

    from emulator.compat.process_group import ProcessGroupXla

    group = ProcessGroupXla(dist.HashStore(), 0, 1, datetime.timedelta(seconds=10), [0])
    a, b = torch.arange(3.0), torch.arange(2.0).reshape(1, 2).t()  # different sizes, one not contiguous
    group.allreduce_coalesced([a, b]).wait()
    group.broadcast([a, b]).wait()
    assert a.tolist() == [0.0, 1.0, 2.0] and b.flatten().tolist() == [0.0, 1.0]


def test_pjrt_names_of_torch_xla_2_0(daemon) -> None:
    done = exec_run(daemon, torchrun("pjrt_names.py"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(re.findall(r"rank (\d) of 2 pjrt True NEURON sum \[2\.0, 2\.0\]", done.stdout)) == ["0", "1"]
