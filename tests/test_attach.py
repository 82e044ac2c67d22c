"""Runtime attach with real processes and a real daemon: claims, conflicts, release on death."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import BIN, one_clear_line, run_tool, start_holder, tool_env, wait_until


def held_cores(daemon) -> dict[int, int]:
    return {core: p["pid"] for p in daemon.processes() for core in p["neuroncores"]}


def test_xla_device_registers_pid_command_tag_and_version(daemon, short_tmp: Path, holders) -> None:
    holder = start_holder(daemon.address, short_tmp, {"NEURON_PROCESS_TAG": "bert app"})
    holders.append(holder)
    assert holder.attached, holder.stderr
    assert holder.cores == [0, 1]  # default: every NeuronCore of the instance
    [proc] = daemon.processes()
    assert proc["pid"] == holder.pid
    assert proc["command"] == "python3 train_monitor.py"
    assert proc["tag"] == "bert app"
    assert proc["runtime_version"] == "2.29.14"
    assert proc["kind"] == "runtime"
    # what neuron-ls -j shows for it
    out = run_tool(["neuron-ls", "-j"], daemon.address)
    assert out.returncode == 0
    [device] = json.loads(out.stdout)
    assert device["neuron_processes"] == [
        {"pid": holder.pid, "command": "python3 train_monitor.py", "neuron_runtime_version": "2.29.14"}
    ]


def test_tag_defaults_to_pid(daemon, short_tmp: Path, holders) -> None:
    holder = start_holder(daemon.address, short_tmp)
    holders.append(holder)
    assert daemon.processes()[0]["tag"] == str(holder.pid)


@pytest.mark.parametrize(
    ("env", "cores"),
    [
        ({"NEURON_RT_VISIBLE_CORES": "3"}, [3]),
        ({"NEURON_RT_VISIBLE_CORES": "4-7"}, [4, 5, 6, 7]),
        ({"NEURON_RT_VISIBLE_CORES": "8,9,10"}, [8, 9, 10]),
        ({"NEURON_RT_VISIBLE_CORES": "12-14,15"}, [12, 13, 14, 15]),
        ({"NEURON_RT_VISIBLE_CORES": "30-31", "NEURON_RT_NUM_CORES": "5"}, [30, 31]),  # VISIBLE wins
        ({"NEURON_RT_NUM_CORES": "3"}, [0, 1, 2]),
        ({"LOCAL_RANK": "5"}, [5]),
        ({"LOCAL_RANK": "1", "NEURON_RT_VISIBLE_CORES": "16-19"}, [17]),
    ],
)
def test_valid_core_selections(env: dict[str, str], cores: list[int], daemon_factory, short_tmp: Path, holders) -> None:
    daemon = daemon_factory("trn1.32xlarge")
    holder = start_holder(daemon.address, short_tmp, env)
    holders.append(holder)
    assert holder.attached, holder.stderr
    assert holder.cores == cores
    assert held_cores(daemon) == dict.fromkeys(cores, holder.pid)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"NEURON_RT_VISIBLE_CORES": "3,5,6"}, "contiguous"),
        ({"NEURON_RT_VISIBLE_CORES": "6-3"}, "backwards"),
        ({"NEURON_RT_VISIBLE_CORES": "two"}, "not a core id"),
        ({"NEURON_RT_VISIBLE_CORES": "1,"}, "not a core id"),
        ({"NEURON_RT_VISIBLE_CORES": "-1"}, "not a core id"),
        ({"NEURON_RT_VISIBLE_CORES": "30-33"}, "NeuronCore 32 does not exist (trn1.32xlarge has NeuronCores 0-31)"),
        ({"NEURON_RT_NUM_CORES": "33"}, "asks for 33 NeuronCores, trn1.32xlarge has 32"),
        ({"NEURON_RT_NUM_CORES": "x"}, "not a non-negative integer"),
        ({"NEURON_PROCESS_TAG": "t" * 256}, "longer than 255"),
    ],
)
def test_invalid_core_selections_fail_clearly(
    env: dict[str, str], message: str, daemon_factory, short_tmp: Path
) -> None:
    daemon = daemon_factory("trn1.32xlarge")
    holder = start_holder(daemon.address, short_tmp, env)
    assert not holder.attached
    assert holder.proc.returncode == 1
    assert message in holder.stderr
    assert "Traceback" not in holder.stderr
    assert daemon.processes() == []


def test_claim_conflict_names_core_and_holder_and_leaves_holder_alone(daemon_factory, short_tmp: Path, holders) -> None:
    daemon = daemon_factory("trn1.32xlarge")
    first = start_holder(daemon.address, short_tmp, {"NEURON_RT_VISIBLE_CORES": "2-5"})
    holders.append(first)
    assert first.attached
    second = start_holder(daemon.address, short_tmp, {"NEURON_RT_VISIBLE_CORES": "4-7"})
    assert not second.attached and second.proc.returncode == 1
    assert "NRT_EXEC_NC_BUSY" in second.stderr
    assert "Requested:nc4-nc7 Available:2" in second.stderr
    assert f"nc4-nc5 held by PID {first.pid}" in second.stderr
    # the runtime's own log line, as on a real host
    assert "ERROR  NRT:nrt_allocate_neuron_cores NeuronCore(s) not available" in second.stderr
    # the holder keeps its cores and runs on
    assert first.proc.poll() is None
    assert held_cores(daemon) == dict.fromkeys(range(2, 6), first.pid)
    # default (all cores) and NUM_CORES also refuse while cores are held
    everything = start_holder(daemon.address, short_tmp)
    assert not everything.attached and f"held by PID {first.pid}" in everything.stderr
    too_many = start_holder(daemon.address, short_tmp, {"NEURON_RT_NUM_CORES": "27"})
    assert not too_many.attached and "NRT_LOAD_NOT_ENOUGH_NC" in too_many.stderr
    # a block that fits beside the holder is found
    fits = start_holder(daemon.address, short_tmp, {"NEURON_RT_NUM_CORES": "26"})
    holders.append(fits)
    assert fits.cores == list(range(6, 32))


def test_normal_exit_releases_cores(daemon, short_tmp: Path, holders) -> None:
    holder = start_holder(daemon.address, short_tmp)
    assert holder.attached
    assert holder.release() == 0
    assert daemon.processes() == []  # released by the exit handler before the process ended


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_process_releases_cores_within_one_second(sig: int, daemon, short_tmp: Path, holders) -> None:
    holder = start_holder(daemon.address, short_tmp)
    holders.append(holder)
    assert holder.attached and held_cores(daemon)
    holder.proc.send_signal(sig)  # not reaped by us: it stays a zombie, which must count as dead
    killed_at = time.monotonic()
    assert wait_until(lambda: daemon.processes() == [], timeout=1.0, interval=0.01)
    released_after = time.monotonic() - killed_at
    assert released_after < 1.0
    # and the cores can be claimed again at once
    again = start_holder(daemon.address, short_tmp)
    holders.append(again)
    assert again.attached and again.cores == [0, 1]


def test_process_dying_mid_attach_sequence_does_not_leak(daemon, short_tmp: Path, holders) -> None:
    # several processes come and go; the daemon ends with exactly the live ones
    live = []
    for i in range(2):
        h = start_holder(daemon.address, short_tmp, {"NEURON_RT_VISIBLE_CORES": str(i)})
        holders.append(h)
        live.append(h)
    live[0].proc.kill()
    assert wait_until(lambda: [p["pid"] for p in daemon.processes()] == [live[1].pid], timeout=1.0)


def test_torchrun_gives_one_core_per_local_rank(daemon_factory, short_tmp: Path) -> None:
    daemon = daemon_factory("trn1.32xlarge")
    script = short_tmp / "ranks.py"
    script.write_text(
        "import json\n"
        "import torch.distributed as dist\n"
        "import emulator.xla as xm\n"
        "from neurontools.sources.daemon_client import DaemonClient\n"
        "dist.init_process_group('gloo')\n"
        "xm.xla_device()\n"
        "dist.barrier()  # both ranks attached\n"
        "held = {p['pid']: p['neuroncores'] for p in DaemonClient().get('/processes')}\n"
        "dist.barrier()\n"
        "out = {'rank': xm.get_ordinal(), 'world': xm.xrt_world_size(), "
        "'cores': list(xm.neuroncores()), 'held': sorted(held.values())}\n"
        f"open('{short_tmp}/rank%d.json' % xm.get_ordinal(), 'w').write(json.dumps(out))\n"
        "dist.destroy_process_group()\n"
    )
    proc = subprocess.run(
        [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", str(script)],
        env=tool_env(daemon.address, {"OMP_NUM_THREADS": "1"}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    ranks = [json.loads((short_tmp / f"rank{r}.json").read_text()) for r in range(2)]  # one file per rank
    assert [r["cores"] for r in ranks] == [[0], [1]]
    assert all(r["world"] == 2 for r in ranks)
    assert all(r["held"] == [[0], [1]] for r in ranks)  # two processes, one core each, at the same time
    assert wait_until(lambda: daemon.processes() == [], timeout=1.0)


def test_no_daemon_is_a_clear_error_not_a_hang(short_tmp: Path) -> None:
    started = time.monotonic()
    holder = start_holder(str(short_tmp / "absent.sock"), short_tmp)
    assert time.monotonic() - started < 20
    assert not holder.attached and holder.proc.returncode == 1
    assert "no Neuron emulator daemon at" in holder.stderr
    assert "neuron-emulator up" in holder.stderr and "NEURON_EMULATOR_ADDR" in holder.stderr
    assert "Traceback" not in holder.stderr


def test_uncaught_runtime_error_in_a_script_is_a_runtime_error(short_tmp: Path) -> None:
    # A plain script that does not catch the error still fails with the runtime's message.
    proc = subprocess.run(
        [sys.executable, "-c", "import emulator.xla as xm; xm.xla_device()"],
        env=tool_env(str(short_tmp / "absent.sock")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "NeuronRuntimeError: NRT_FAILURE: no Neuron emulator daemon" in proc.stderr


def test_forked_child_does_not_inherit_parent_cores(daemon, short_tmp: Path) -> None:
    code = (
        "import os, sys\n"
        "from emulator.runtime.attach import attach, current_session\n"
        "attach()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(0 if current_session() is None else 3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "sys.exit(os.waitstatus_to_exitcode(status))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=tool_env(daemon.address), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert daemon.processes() == []


def test_bad_address_env_is_one_line(short_tmp: Path) -> None:
    out = run_tool(["neuron-ls"], "ftp://example")
    assert out.returncode == 1 and out.stdout == ""
    assert one_clear_line(out.stderr) and "NEURON_EMULATOR_ADDR" in out.stderr
    assert os.environ.get("NEURON_EMULATOR_ADDR") != "ftp://example"
