"""`make demo`'s script: it shows a trn1.32xlarge with a live process, and leaves nothing behind."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import psutil

from tests.support import tool_env

ROOT = Path(__file__).parent.parent


def test_demo_shows_live_process_and_cleans_up() -> None:
    before = {p.pid for p in psutil.process_iter()}
    proc = subprocess.run(
        ["bash", "scripts/demo.sh"], cwd=ROOT, env=tool_env(None), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "instance-type: trn1.32xlarge" in out
    assert "attached: device=xla:0 neuroncores=nc0-nc7" in out
    # neuron-ls --wide lists the demo process on devices 0-3 with its runtime version
    rows = [
        ln
        for ln in out.splitlines()
        if re.match(r"\| [0-3] +\| 2 +\| 32 GB .*examples/hold_cores.py \| 2\.29\.14 \|", ln)
    ]
    assert len(rows) == 4
    assert "Neuron Device Topology" in out and "8 of 32 in use" in out
    socket_dir = re.search(r"up at (\S+)/neuron-emulator\.sock", out)
    assert socket_dir and not Path(socket_dir.group(1)).exists()
    demo_dir = socket_dir.group(1)

    def started_by_the_demo(p: psutil.Process) -> bool:
        cmdline = p.info["cmdline"] or []
        if any("hold_cores" in a for a in cmdline):
            return True
        if not any("emulator.cli" in a for a in cmdline):
            return False
        try:  # a daemon of the demo's, not one another test (another pytest worker) started
            return any(demo_dir in a for a in cmdline) or demo_dir in p.environ().get("NEURON_EMULATOR_ADDR", "")
        except psutil.Error:
            return False

    leftovers = [p for p in psutil.process_iter(["pid", "cmdline"]) if p.pid not in before and started_by_the_demo(p)]
    assert leftovers == []
