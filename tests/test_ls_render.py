"""Golden and rule tests for the neuron-ls renderer (docs/reference/neuron-ls.md).

Golden files live in tests/golden/ls:

* ``spec_*`` are the reference outputs of docs/reference/neuron-ls.md §Reference outputs, copied
  verbatim (that section says which are captures of the real tool and which were written by its
  rules); when a reference leaves out the ``instance-type``/``instance-id`` lines they are
  prepended. They are never regenerated: a mismatch is a renderer bug. ``REFERENCE.sha256``
  pins their bytes, so an edit to one of them fails the tests until the manifest is changed too
  (deliberately, in the same commit).
* ``gen_*`` are outputs we constructed with the same rules. ``UPDATE_GOLDEN=1 pytest ...`` rewrites
  them (and only them) from the current renderer; review the diff before committing.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from neurontools.contract.inventory import (
    Device,
    Inventory,
    NeuronProcess,
    inventory_from_dict,
)
from neurontools.ls import table, topology
from neurontools.ls.render import format_id_ranges, format_memory, render_json, render_text

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures" / "ls"
GOLDEN = HERE / "golden" / "ls"
REFERENCE_MANIFEST = GOLDEN / "REFERENCE.sha256"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


def load(name: str) -> Inventory:
    return inventory_from_dict(json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8")))


def show_diff(expected: str, actual: str, name: str) -> str:
    """Unified diff with ``$`` marking each line end, so trailing spaces and newlines show."""
    exp = [line + "$" for line in expected.split("\n")]
    act = [line + "$" for line in actual.split("\n")]
    return "\n".join(difflib.unified_diff(exp, act, f"golden/ls/{name}", "rendered", lineterm=""))


# --- golden cases ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    golden: str
    fixture: str
    flags: dict[str, bool] = field(default_factory=dict)
    json: bool = False
    match: str = "exact"  # exact | prefix (reference excerpt of the first rows) | contains (one JSON element)
    headers_added: bool = False  # the reference had no header lines; we prepended them

    @property
    def from_spec(self) -> bool:
        return self.golden.startswith("spec_")

    def render(self) -> str:
        inv = load(self.fixture)
        return render_json(inv, **self.flags) if self.json else render_text(inv, **self.flags)


CASES = [
    # Verbatim from docs/reference/neuron-ls.md §Reference outputs.
    Case("spec_trn1_2xlarge_default.txt", "trn1_2xlarge_idle"),
    Case("spec_trn1_2xlarge_wide.txt", "trn1_2xlarge_train", {"wide": True}, headers_added=True),
    Case("spec_trn1_2xlarge_all.txt", "trn1_2xlarge_all", {"show_all": True}, headers_added=True),
    Case("spec_trn1_32xlarge_default.txt", "trn1_32xlarge_idle"),
    Case(
        "spec_trn1_32xlarge_wide_excerpt.txt",
        "trn1_32xlarge_run_clm",
        {"wide": True},
        match="prefix",
        headers_added=True,
    ),
    Case("spec_trn1_32xlarge_topology.txt", "trn1_32xlarge_idle", {"topology": True}, headers_added=True),
    Case("spec_trn1_2xlarge_json_idle.json", "trn1_2xlarge_idle", json=True),
    Case("spec_trn1_32xlarge_json_dev5_entry.json", "trn1_32xlarge_dev5", json=True, match="contains"),
    # Constructed by us.
    Case("gen_trn1_2xlarge_topology.txt", "trn1_2xlarge_idle", {"topology": True}),
    Case("gen_trn1_2xlarge_wide_idle.txt", "trn1_2xlarge_idle", {"wide": True}),
    Case("gen_trn1_2xlarge_wide_all.txt", "trn1_2xlarge_all", {"wide": True, "show_all": True}),
    Case("gen_trn1_2xlarge_json_train.json", "trn1_2xlarge_train", json=True),
    Case("gen_trn1_2xlarge_json_all.json", "trn1_2xlarge_all", {"show_all": True}, json=True),
    Case("gen_trn1_32xlarge_wide.txt", "trn1_32xlarge_run_clm", {"wide": True}),
    Case("gen_trn1_32xlarge_all.txt", "trn1_32xlarge_run_clm", {"show_all": True}),
    Case("gen_trn1_32xlarge_wide_dev5.txt", "trn1_32xlarge_dev5", {"wide": True}),
    Case("gen_trn1_32xlarge_json_dev5.json", "trn1_32xlarge_dev5", json=True),
    Case("gen_trn1_32xlarge_wide_mixed.txt", "trn1_32xlarge_mixed", {"wide": True}),
    Case("gen_trn1_32xlarge_all_mixed.txt", "trn1_32xlarge_mixed", {"show_all": True}),
    Case("gen_trn1_32xlarge_json_all_mixed.json", "trn1_32xlarge_mixed", {"show_all": True}, json=True),
]


@pytest.mark.parametrize("case", CASES, ids=[c.golden for c in CASES])
def test_golden(case: Case) -> None:
    path = GOLDEN / case.golden
    actual = case.render()
    if UPDATE and not case.from_spec:
        path.write_text(actual, encoding="utf-8", newline="")
    if not path.exists():
        pytest.fail(f"missing golden {path.name}; create it with UPDATE_GOLDEN=1")
    expected = path.read_text(encoding="utf-8")
    if case.match == "exact":
        if actual != expected:
            pytest.fail("output differs from golden:\n" + show_diff(expected, actual, case.golden))
    elif case.match == "prefix":
        if not actual.startswith(expected):
            head = actual[: len(expected)]
            pytest.fail("output does not start with the reference excerpt:\n" + show_diff(expected, head, case.golden))
    else:
        assert case.match == "contains"
        if expected not in actual:
            pytest.fail("reference excerpt not found in output; full output:\n" + actual)


def reference_hashes() -> dict[str, str]:
    """``sha256sum`` lines of REFERENCE.sha256: file name -> hex digest."""
    hashes = {}
    for line in REFERENCE_MANIFEST.read_text(encoding="utf-8").splitlines():
        digest, name = line.split(maxsplit=1)
        hashes[name.lstrip("*")] = digest
    return hashes


@pytest.mark.parametrize("case", [c for c in CASES if c.from_spec], ids=lambda c: c.golden)
def test_reference_goldens_are_unchanged(case: Case) -> None:
    """Every spec_* golden has the bytes it was transcribed with (REFERENCE.sha256)."""
    digest = hashlib.sha256((GOLDEN / case.golden).read_bytes()).hexdigest()
    assert reference_hashes().get(case.golden) == digest


def test_reference_manifest_lists_exactly_the_reference_goldens() -> None:
    assert set(reference_hashes()) == {c.golden for c in CASES if c.from_spec}


def test_golden_files_all_used() -> None:
    names = {c.golden for c in CASES}
    on_disk = {p.name for p in GOLDEN.iterdir()} - {REFERENCE_MANIFEST.name}
    assert on_disk == names


# --- output framing ----------------------------------------------------------------------------


@pytest.mark.parametrize("flags", [{}, {"wide": True}, {"show_all": True}, {"topology": True}])
@pytest.mark.parametrize("fixture", ["trn1_2xlarge_all", "trn1_32xlarge_mixed"])
def test_text_ends_with_one_newline_and_header_lines(fixture: str, flags: dict[str, bool]) -> None:
    inv = load(fixture)
    out = render_text(inv, **flags)
    assert out.endswith("\n") and not out.endswith("\n\n")
    lines = out.split("\n")
    assert lines[0] == f"instance-type: {inv.instance.instance_type}"
    assert lines[1] == f"instance-id: {inv.instance.instance_id}"
    assert lines[2].startswith("+-")


def test_json_has_no_header_and_no_trailing_newline() -> None:
    out = render_json(load("trn1_32xlarge_mixed"), show_all=True)
    assert out.startswith("[\n    {\n") and out.endswith("\n]")
    assert "instance-type" not in out


@pytest.mark.parametrize("fixture", sorted(p.stem for p in FIXTURES.glob("*.json")))
@pytest.mark.parametrize("flags", [{}, {"show_all": True}, {"wide": True, "show_all": True}])
def test_json_round_trip_types(fixture: str, flags: dict[str, bool]) -> None:
    inv = load(fixture)
    data = json.loads(render_json(inv, **flags))
    assert isinstance(data, list) and len(data) == len(inv.devices)
    keys = [
        "neuron_device",
        "bdf",
        "cpu_affinity",
        "numa_node",
        "connected_to",
        "nc_count",
        "memory_size",
        "neuroncore_ids",
        "neuron_processes",
    ]
    for entry, dev in zip(data, inv.devices, strict=True):
        assert list(entry) == keys
        assert entry["neuron_device"] == dev.index
        assert entry["bdf"] == dev.bdf and entry["bdf"].startswith("0000:")
        assert entry["cpu_affinity"] == dev.cpu_affinity
        assert entry["numa_node"] == str(dev.numa_node)
        if dev.connected_to is None:
            assert entry["connected_to"] is None
        else:
            assert entry["connected_to"] == list(dev.connected_to)
        assert type(entry["nc_count"]) is int and type(entry["memory_size"]) is int
        assert entry["neuroncore_ids"] == list(dev.neuroncore_ids)
        procs = inv.processes_on(dev, include_tools=flags.get("show_all", False))
        assert [p["pid"] for p in entry["neuron_processes"]] == [p.pid for p in procs]
        for p in entry["neuron_processes"]:
            assert list(p) == ["pid", "command", "neuron_runtime_version"]
            assert type(p["pid"]) is int and isinstance(p["command"], str)
            assert isinstance(p["neuron_runtime_version"], str)
            assert len(p["command"]) <= (80 if flags.get("wide") else 40)


def test_json_tools_only_with_show_all() -> None:
    inv = load("trn1_2xlarge_all")
    plain = json.loads(render_json(inv))[0]["neuron_processes"]
    every = json.loads(render_json(inv, show_all=True))[0]["neuron_processes"]
    assert [p["pid"] for p in plain] == [4242]
    assert [(p["pid"], p["neuron_runtime_version"]) for p in every] == [
        (4242, "2.29.14"),
        (4391, "NA"),
        (4517, "NA"),
    ]


# --- table rules (docs/reference/neuron-ls.md §Table rendering rules) -----------------------------


def test_rule3_centering_odd_slack_goes_right() -> None:
    assert table.center("CPU", 14) == "     CPU      "
    assert table.center("NEURON", 10) == "  NEURON  "
    assert table.center("PID", 6) == " PID  "
    lines = table.table_lines([("CPU", "AFFINITY")], [[["32-63,96-127"]]])
    assert lines[1] == "|     CPU      |"
    assert lines[2] == "|   AFFINITY   |"


def test_rule2_width_from_widest_header_or_cell() -> None:
    assert table.column_widths([("NEURON", "CORE IDS"), ("A", "")], [[["0-1", "longer cell"]]]) == [10, 13]


def test_rule1_4_5_layout() -> None:
    out = table.render_table([("A", "B"), ("C", "")], [[["1", "x"]], [["22", "yy"]]])
    assert out == "\n".join(
        [
            "+----+----+",
            "| A  | C  |",
            "| B  |    |",
            "+----+----+",
            "| 1  | x  |",
            "| 22 | yy |",
            "+----+----+",
        ]
    )


def _borders(text: str) -> int:
    return sum(1 for line in text.split("\n") if line.startswith("+"))


def test_rule7_no_separators_when_every_group_has_one_row() -> None:
    groups = [table.group_rows([str(i)], [["p"]], 1) for i in range(3)]
    assert _borders(table.render_table([("D", ""), ("P", "")], groups)) == 3


def test_rule7_separators_everywhere_when_one_group_has_two_rows() -> None:
    groups = [table.group_rows([str(i)], [["p"]], 1) for i in range(3)]
    groups[2] = table.group_rows(["2"], [["p"], ["q"]], 1)
    out = table.render_table([("D", ""), ("P", "")], groups)
    assert _borders(out) == 3 + 2
    assert out.split("\n")[4:] == [
        "| 0 | p |",
        "+---+---+",
        "| 1 | p |",
        "+---+---+",
        "| 2 | p |",
        "|   | q |",
        "+---+---+",
    ]


def test_rule6_continuation_rows_blank_device_cells() -> None:
    assert table.group_rows(["0", "2"], [["1", "a"], ["2", "b"]], 2) == [
        ["0", "2", "1", "a"],
        ["", "", "2", "b"],
    ]
    assert table.group_rows(["0", "2"], [], 2) == [["0", "2", "", ""]]


def test_rule7_in_render_wide_vs_all() -> None:
    inv = load("trn1_32xlarge_run_clm")
    assert _borders(render_text(inv, wide=True)) == 3  # one process per device
    mixed = load("trn1_32xlarge_mixed")
    assert _borders(render_text(mixed, wide=True)) == 3 + 15  # device 8 holds two processes
    assert _borders(render_text(mixed, show_all=True)) == 3 + 15


@pytest.mark.parametrize("limit", [40, 80])
def test_rule8_truncation_at_exactly_limit(limit: int) -> None:
    exact = "x" * limit
    assert table.truncate(exact, limit) == exact
    longer = "y" * (limit - 3) + "ABCD"
    assert table.truncate(longer, limit) == "y" * (limit - 3) + "..."
    assert len(table.truncate(longer, limit)) == limit


@pytest.mark.parametrize(("flags", "limit"), [({"show_all": True}, 40), ({"wide": True}, 80)])
def test_rule8_truncation_in_table(flags: dict[str, bool], limit: int) -> None:
    base = load("trn1_2xlarge_idle")
    for length in (limit, limit + 1):
        command = ("c" * (length - 1)) + "Z"
        inv = base.with_processes([NeuronProcess(1, command, "1", "2.29.14", neuroncores=(0,))])
        out = render_text(inv, **flags)
        shown = command if length == limit else "c" * (limit - 3) + "..."
        assert f"| {shown} |" in out
        assert json.loads(render_json(inv, wide=flags.get("wide", False)))[0]["neuron_processes"][0]["command"] == shown


def test_connected_column_omitted_without_connections() -> None:
    small = load("trn1_2xlarge_idle")
    for flags in ({}, {"wide": True}, {"show_all": True}, {"topology": True}):
        assert "CONNECTED" not in render_text(small, **flags)
    assert "CONNECTED" in render_text(load("trn1_32xlarge_idle"))


def test_connected_column_kept_when_one_device_has_links() -> None:
    inv = load("trn1_2xlarge_idle")
    d0 = inv.devices[0]
    d1 = Device(1, 2, (2, 3), d0.memory_size, None, "0000:00:1f.0", "0-7", -1)
    linked = Inventory(inv.instance, inv.hardware, (replace(d0, connected_to=(1,)), d1))
    lines = render_text(linked).split("\n")
    assert "CONNECTED" in lines[3]
    assert lines[6] == "| 0      | 2      | 0-1      | 32 GB  | 1         | 0000:00:1e.0 | 0-7      | -1   |"
    assert lines[7] == "| 1      | 2      | 2-3      | 32 GB  |           | 0000:00:1f.0 | 0-7      | -1   |"


# --- mode selection ----------------------------------------------------------------------------


def test_default_mode_has_no_process_columns() -> None:
    assert render_text(load("trn1_32xlarge_run_clm")) == render_text(load("trn1_32xlarge_idle"))


def test_topology_wins_over_wide_and_all() -> None:
    inv = load("trn1_32xlarge_mixed")
    expected = render_text(inv, topology=True)
    assert "PID" not in expected
    assert render_text(inv, topology=True, wide=True) == expected
    assert render_text(inv, topology=True, show_all=True, wide=True) == expected


def test_wide_and_all_lists_tools_with_80_char_commands() -> None:
    inv = load("trn1_32xlarge_mixed")
    out = render_text(inv, wide=True, show_all=True)
    assert "| 81000 | neuron-top " in out
    assert "--model_name_or_path ... |" in out
    assert "81000" not in render_text(inv, wide=True)


def test_wide_device_without_process_has_empty_cells() -> None:
    lines = render_text(load("trn1_2xlarge_idle"), wide=True).split("\n")
    assert lines[6] == "| 0      | 2      | 32 GB  | 00:1e.0 |     |         |         |"


def test_cell_formats() -> None:
    assert format_memory(34359738368) == "32 GB"
    assert format_memory(34359738368 + 2**30 - 1) == "32 GB"
    assert format_id_ranges([30, 31]) == "30-31"
    assert format_id_ranges([4]) == "4"
    assert format_id_ranges([0, 1, 4, 5, 7]) == "0-1,4-5,7"


# --- unusual command lines -------------------------------------------------------------------------


def _with_command(command: str) -> Inventory:
    base = load("trn1_2xlarge_idle")
    return base.with_processes([NeuronProcess(9, command, "9", "2.29.14", neuroncores=(0, 1))])


def test_non_ascii_command_keeps_the_grid() -> None:
    inv = _with_command("python3 entraîner_模型.py --note=ok")
    out = render_text(inv, wide=True)
    rows = out.split("\n")[2:-1]
    widths = {table.display_width(r) for r in rows}
    assert len(widths) == 1, rows
    assert "entraîner_模型.py" in out
    assert json.loads(render_json(inv))[0]["neuron_processes"][0]["command"] == "python3 entraîner_模型.py --note=ok"
    assert "entraîner_模型" in render_json(inv)  # written as UTF-8, not \u escapes


def test_control_characters_and_undecodable_bytes() -> None:
    command = "python3 a.py --sep '\t' --x=\n" + b"caf\xe9".decode("utf-8", "surrogateescape")
    inv = _with_command(command)
    out = render_text(inv, show_all=True)
    assert "python3 a.py --sep '?' --x=?caf\ufffd" in out
    out.encode("utf-8")
    js = render_json(inv)
    js.encode("utf-8")
    assert json.loads(js)[0]["neuron_processes"][0]["command"] == "python3 a.py --sep '\t' --x=\ncaf\ufffd"


def test_json_escapes_like_go() -> None:
    js = render_json(_with_command("sh -c 'a && b > out.log'"))
    assert "\\u0026\\u0026 b \\u003e out.log" in js
    assert json.loads(js)[0]["neuron_processes"][0]["command"] == "sh -c 'a && b > out.log'"


# --- topology -----------------------------------------------------------------------------------


def _torus(rows: int, cols: int, label: list[int] | None = None) -> dict[int, tuple[int, ...]]:
    ids = label or list(range(rows * cols))

    def at(r: int, c: int) -> int:
        return ids[(r % rows) * cols + c % cols]

    return {
        at(r, c): (at(r - 1, c), at(r, c - 1), at(r + 1, c), at(r, c + 1)) for r in range(rows) for c in range(cols)
    }


def test_torus_grid_from_connected_to() -> None:
    inv = load("trn1_32xlarge_idle")
    grid = topology.derive_grid({d.index: d.connected_to for d in inv.devices})
    assert grid is not None
    assert grid.nodes == tuple(tuple(range(r * 4, r * 4 + 4)) for r in range(4))
    assert all(grid.wrap_row) and all(grid.wrap_col)


def test_topology_lines_are_40_columns() -> None:
    lines = topology.topology_lines(_torus(4, 4))
    body = lines[1 : lines.index("")]
    assert len(body) == 3 + 4 + 3 * 3 + 3
    assert {len(line) for line in body} == {40}
    assert lines[-4:] == ["", "Legend:", "", "        *––► = Wrap-around link"]


def test_topology_follows_links_not_indices() -> None:
    labels = [5, 2, 7, 0, 3, 6]  # a 2x3 torus with shuffled device numbers
    grid = topology.derive_grid(_torus(2, 3, labels))
    assert grid is not None
    # The lowest index (0, second row of the labelling) becomes the top-left node.
    assert grid.nodes == ((0, 3, 6), (5, 2, 7))
    lines = topology.grid_lines(grid)
    assert lines[3] == "*––►[ 0 ]◄––►[ 3 ]◄––►[ 6 ]◄––*"
    assert lines[7] == "*––►[ 5 ]◄––►[ 2 ]◄––►[ 7 ]◄––*"


def test_topology_mesh_without_wrap_has_no_legend() -> None:
    mesh = {0: (-1, -1, 2, 1), 1: (-1, 0, 3, -1), 2: (0, -1, -1, 3), 3: (1, 2, -1, -1)}
    lines = topology.topology_lines(mesh)
    assert lines == [
        "Neuron Device Topology",
        "    [ 0 ]◄––►[ 1 ]    ",
        "      ▲        ▲      ",
        "      │        │      ",
        "      ▼        ▼      ",
        "    [ 2 ]◄––►[ 3 ]    ",
    ]


def test_single_device_topology_is_our_choice() -> None:
    assert topology.topology_lines({0: None}) == ["Neuron Device Topology", "", "[ 0 ]"]
    out = render_text(load("trn1_2xlarge_idle"), topology=True)
    assert out.endswith("+\n\n\nNeuron Device Topology\n\n[ 0 ]\n")
    assert "Legend" not in out


def test_unrecognised_links_fall_back_to_node_list() -> None:
    assert topology.topology_lines({0: (1,), 1: (0,)}) == ["Neuron Device Topology", "", "[ 0 ]    [ 1 ]"]
