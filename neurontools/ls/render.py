"""What neuron-ls writes to stdout for an inventory (docs/reference/neuron-ls.md, current ≥2.25 format).

Modes and how flag combinations resolve (the docs describe each flag alone; docs/reference/neuron-ls.md §Modes):

* default: DEVICE, CORES, CORE IDS, MEMORY, CONNECTED, BDF (full), CPU AFFINITY, NUMA NODE;
* ``wide`` (-w): DEVICE, CORES, MEMORY, CONNECTED, BDF (short), PID, COMMAND (<= 80), RUNTIME
  VERSION; runtime processes only;
* ``show_all`` (-a): same columns, COMMAND <= 40, tool processes too (runtime version ``NA``);
* ``wide`` and ``show_all``: every process, COMMAND <= 80 (each flag keeps its own effect);
* ``topology`` (-t): DEVICE, CORES, MEMORY, CONNECTED, BDF (short) and the diagram; it wins over
  ``wide``/``show_all`` (no process columns), as -t documents a table without them.

CONNECTED DEVICES is left out when no device has a neighbour (trn1.2xlarge).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from neurontools.contract.inventory import NOT_A_RUNTIME, RUNTIME, Device, Inventory, NeuronProcess
from neurontools.ls.table import Header, group_rows, render_table, sanitize_cell, truncate
from neurontools.ls.topology import topology_lines

COMMAND_LIMIT = 40
WIDE_COMMAND_LIMIT = 80
GIB = 2**30

# Two blank lines separate the table from the topology title (current format,
# docs/reference/neuron-ls.md §Topology diagram).
TABLE_TOPOLOGY_GAP = 2

DeviceCell = Callable[[Device], str]


# --- cell formatting -------------------------------------------------------------------------


def format_memory(size: int) -> str:
    """Device memory as whole GiB: 34359738368 -> ``32 GB``."""
    return f"{size // GIB} GB"


def format_id_ranges(ids: Sequence[int]) -> str:
    """Global core ids as a cpulist-style range: ``[0, 1]`` -> ``0-1``, ``[4]`` -> ``4``,
    ``[0, 1, 4]`` -> ``0-1,4`` (Trn1 devices always have two consecutive ids)."""
    parts: list[str] = []
    values = sorted(set(ids))
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        parts.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ",".join(parts)


def format_connected(device: Device) -> str:
    return ", ".join(str(n) for n in device.connected_to or ())


def runtime_version(process: NeuronProcess) -> str:
    return process.runtime_version if process.kind == RUNTIME else NOT_A_RUNTIME


def command_limit(wide: bool) -> int:
    return WIDE_COMMAND_LIMIT if wide else COMMAND_LIMIT


# --- column sets -----------------------------------------------------------------------------

DEVICE: tuple[Header, DeviceCell] = (("NEURON", "DEVICE"), lambda d: str(d.index))
CORES: tuple[Header, DeviceCell] = (("NEURON", "CORES"), lambda d: str(d.nc_count))
CORE_IDS: tuple[Header, DeviceCell] = (("NEURON", "CORE IDS"), lambda d: format_id_ranges(d.neuroncore_ids))
MEMORY: tuple[Header, DeviceCell] = (("NEURON", "MEMORY"), lambda d: format_memory(d.memory_size))
CONNECTED: tuple[Header, DeviceCell] = (("CONNECTED", "DEVICES"), format_connected)
FULL_BDF: tuple[Header, DeviceCell] = (("PCI", "BDF"), lambda d: d.bdf)
SHORT_BDF: tuple[Header, DeviceCell] = (("PCI", "BDF"), lambda d: d.short_bdf)
CPU_AFFINITY: tuple[Header, DeviceCell] = (("CPU", "AFFINITY"), lambda d: d.cpu_affinity)
NUMA_NODE: tuple[Header, DeviceCell] = (("NUMA", "NODE"), lambda d: str(d.numa_node))

PROCESS_HEADERS: tuple[Header, ...] = (("PID", ""), ("COMMAND", ""), ("RUNTIME", "VERSION"))


def has_connections(inv: Inventory) -> bool:
    return any(d.connected_to for d in inv.devices)


def device_columns(inv: Inventory, *, processes: bool, topology: bool) -> list[tuple[Header, DeviceCell]]:
    """Device-level columns of the mode, CONNECTED DEVICES only when some device has links."""
    connected = [CONNECTED] if has_connections(inv) else []
    if processes or topology:
        return [DEVICE, CORES, MEMORY, *connected, SHORT_BDF]
    return [DEVICE, CORES, CORE_IDS, MEMORY, *connected, FULL_BDF, CPU_AFFINITY, NUMA_NODE]


def process_cells(process: NeuronProcess, limit: int) -> list[str]:
    return [str(process.pid), sanitize_cell(truncate(process.command, limit)), runtime_version(process)]


# --- text ------------------------------------------------------------------------------------


def header_lines(inv: Inventory) -> list[str]:
    """``instance-type`` / ``instance-id`` lines before every table (docs/reference/neuron-ls.md §Header lines)."""
    return [f"instance-type: {inv.instance.instance_type}", f"instance-id: {inv.instance.instance_id}"]


def device_table(inv: Inventory, *, wide: bool, show_all: bool, topology: bool) -> str:
    """The table of the mode selected by the flags (see the module docstring), no trailing newline."""
    with_processes = (wide or show_all) and not topology
    columns = device_columns(inv, processes=with_processes, topology=topology)
    headers = [h for h, _ in columns] + (list(PROCESS_HEADERS) if with_processes else [])
    limit = command_limit(wide)
    groups = []
    for device in inv.devices:
        leading = [sanitize_cell(cell(device)) for _, cell in columns]
        if with_processes:
            procs = inv.processes_on(device, include_tools=show_all)
            groups.append(group_rows(leading, [process_cells(p, limit) for p in procs], len(PROCESS_HEADERS)))
        else:
            groups.append([leading])
    return render_table(headers, groups)


def render_text(inv: Inventory, *, wide: bool = False, show_all: bool = False, topology: bool = False) -> str:
    """Exactly what ``neuron-ls`` prints (flags -w, -a, -t), ending with one newline."""
    lines = [*header_lines(inv), device_table(inv, wide=wide, show_all=show_all, topology=topology)]
    if topology:
        links = {d.index: d.connected_to for d in inv.devices}
        lines += [""] * TABLE_TOPOLOGY_GAP + topology_lines(links)
    return "\n".join(lines) + "\n"


# --- JSON ------------------------------------------------------------------------------------

# neuron-ls is written in Go; its JSON encoder writes non-ASCII text as is but escapes these
# (HTML-safe default) and writes undecodable bytes as \ufffd.
_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_GO_ESCAPED = re.compile("[<>&\u2028\u2029]|[\ud800-\udfff]")


def _go_escape(match: re.Match[str]) -> str:
    return _GO_ESCAPES.get(match.group(), "\\ufffd")


def device_json(inv: Inventory, device: Device, *, wide: bool, show_all: bool) -> dict[str, Any]:
    """One element of the ``-j`` array, keys in neuron-ls order (docs/reference/neuron-ls.md §JSON output)."""
    limit = command_limit(wide)
    return {
        "neuron_device": device.index,
        "bdf": device.bdf,
        "cpu_affinity": device.cpu_affinity,
        "numa_node": str(device.numa_node),
        "connected_to": None if device.connected_to is None else list(device.connected_to),
        "nc_count": device.nc_count,
        "memory_size": device.memory_size,
        "neuroncore_ids": list(device.neuroncore_ids),
        "neuron_processes": [
            {
                "pid": p.pid,
                "command": truncate(p.command, limit),
                "neuron_runtime_version": runtime_version(p),
            }
            for p in inv.processes_on(device, include_tools=show_all)
        ],
    }


def render_json(inv: Inventory, *, wide: bool = False, show_all: bool = False) -> str:
    """Exactly what ``neuron-ls -j`` prints: a 4-space indented array, no trailing newline."""
    data = [device_json(inv, d, wide=wide, show_all=show_all) for d in inv.devices]
    text = json.dumps(data, indent=4, ensure_ascii=False)
    return _GO_ESCAPED.sub(_go_escape, text)
