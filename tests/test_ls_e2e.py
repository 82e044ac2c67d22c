"""neuron-ls end to end: a real daemon, real attached processes, the real command, golden files.

Each scenario runs every mode on trn1.2xlarge and trn1.32xlarge with 0, 1 and 2 attached
training processes. The processes are started with 4-digit PIDs (``ns_last_pid``, root) and the
PIDs are then replaced by the canonical ones of docs/reference/neuron-ls.md §Reference outputs
(4242, 4391, and 4517 for neuron-ls itself), which have the same width, so the files are byte-exact on every run.
``UPDATE_GOLDEN=1`` rewrites them; review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support import (
    BIN,
    can_pin_pids,
    canonical_pids,
    spawn_pinned,
    start_holder,
    tool_env,
)

GOLDEN = Path(__file__).parent / "golden" / "ls_e2e"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
CANON_HOLDERS = (4242, 4391)
CANON_LS = 4517

MODES = {
    "default": [],
    "wide": ["-w"],
    "all": ["-a"],
    "topology": ["-t"],
    "json": ["-j"],
    "json_all": ["-j", "-a"],
}
# core selection of the 1st and 2nd process per instance type
SCENARIOS = {
    "trn1.2xlarge": [{"NEURON_RT_VISIBLE_CORES": "0"}, {"NEURON_RT_VISIBLE_CORES": "1"}],
    "trn1.32xlarge": [{"NEURON_RT_VISIBLE_CORES": "0-7"}, {"NEURON_RT_NUM_CORES": "2"}],
}

pytestmark = pytest.mark.skipif(not can_pin_pids(), reason="needs root to choose PIDs (ns_last_pid)")


def run_ls(address: str, flags: list[str]) -> tuple[int, str, str, int]:
    proc = spawn_pinned(
        [str(BIN / "neuron-ls"), *flags],
        env=tool_env(address),
        stdout=-1,
        stderr=-1,
        stdin=-3,
        text=True,
    )
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out, err, proc.pid


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden {path} (run with UPDATE_GOLDEN=1 once)"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, f"{name} differs from golden:\n--- expected\n{expected}\n--- actual\n{text}"


@pytest.mark.parametrize("instance_type", list(SCENARIOS))
def test_every_mode_with_0_1_2_processes(instance_type: str, daemon_factory, short_tmp: Path, holders) -> None:
    daemon = daemon_factory(instance_type)
    pid_map: dict[int, int] = {}
    for count in range(3):
        if count:
            holder = start_holder(daemon.address, short_tmp, SCENARIOS[instance_type][count - 1], pinned=True)
            holders.append(holder)
            assert holder.attached, holder.stderr
            pid_map[holder.pid] = CANON_HOLDERS[count - 1]
        for mode, flags in MODES.items():
            rc, out, err, ls_pid = run_ls(daemon.address, flags)
            assert rc == 0, err
            assert err == ""
            text = canonical_pids(out, {**pid_map, ls_pid: CANON_LS})
            suffix = "json" if mode.startswith("json") else "txt"
            check_golden(f"{instance_type}_{count}proc_{mode}.{suffix}", text)
            if mode.startswith("json"):
                devices = json.loads(out)
                listed = {p["pid"] for d in devices for p in d["neuron_processes"]}
                expected = set(pid_map) | ({ls_pid} if mode == "json_all" else set())
                assert listed == expected


def test_goldens_have_no_stray_files() -> None:
    expected = {
        f"{itype}_{count}proc_{mode}.{'json' if mode.startswith('json') else 'txt'}"
        for itype in SCENARIOS
        for count in range(3)
        for mode in MODES
    }
    assert {p.name for p in GOLDEN.iterdir()} == expected
