"""dashboards/: Prometheus config, alert rules and their unit tests (promtool), both Grafana dashboards.

- promtool accepts the config (rule files resolve), the rules, and the rules' unit tests;
- every PromQL expression of both dashboards parses (promtool, one recording rule per expression);
- the compatible dashboard is the official one of docs/reference/neuron-monitor-prometheus.md
  §Official Grafana dashboard: uid, panels, ids, queries, legends, units, layout;
- our fleet dashboard and the alerts use only metric names the exporters serve (fields.py, the
  §Metrics table of that page, ``up``) or that dashboards/README.md §Fleet metrics promises (the job and
  EFA families a cluster node adds; once fields.py has one, type and labels must agree), and every fleet
  query honours the dashboard's template variables;
- the fleet dashboard's job and node panels compute the right numbers on cluster-shaped series, and the
  cluster scrape configuration (file_sd, job neuron-cluster) is the one the fleet alerts select.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from neurontools.exporter.fields import BY_NAME, FAMILIES, PER_PROCESS_FAMILIES

ROOT = Path(__file__).resolve().parent.parent
DASH = ROOT / "dashboards"
COMPAT_JSON = DASH / "neuron-monitor.json"
FLEET_JSON = DASH / "trn1-fleet.json"
ALERTS = DASH / "alerts.yml"  # per host; tests/test_prometheus_e2e.py fires each of them on one host
FLEET_RULES = DASH / "fleet-alerts.yml"  # cluster nodes and jobs
RULE_FILES = (ALERTS, FLEET_RULES)
README = DASH / "README.md"
CLUSTER_CONFIG = DASH / "prometheus-cluster.yml"
ALERT_TESTS = (DASH / "tests" / "alerts_test.yml", DASH / "tests" / "fleet_alerts_test.yml")
HOST_ALERTS = (
    "NeuronCoreIdleWhileHeld",
    "NeuronHBMUsageHigh",
    "NeuronExecutionErrors",
    "NeuronUncorrectedECC",
    "NeuronExporterDown",
)
FLEET_ALERTS = (
    "NeuronJobStalled",
    "NeuronStragglerNode",
    "NeuronNodeExporterDown",
    "NeuronNodeDaemonDown",
    "NeuronHardwareErrors",
    "NeuronEFADegraded",
)
ALERT_NAMES = HOST_ALERTS + FLEET_ALERTS
CLUSTER_JOB = "neuron-cluster"  # the scrape job of prometheus-cluster.yml, selected by the node alerts
# Labels Prometheus attaches to every series of a cluster node (file_sd target labels, docs/cluster.md).
TARGET_LABELS = frozenset({"job", "instance", "node", "instance_id", "placement_group"})

# The official neuron-monitor-prometheus metric names (docs/reference/neuron-monitor-prometheus.md §Metrics).
COMPAT_METRICS = frozenset(
    {
        "neuroncore_utilization_ratio",
        "neuron_runtime_vcpu_usage_ratio",
        "neuron_runtime_memory_used_bytes",
        "neuroncore_memory_usage_constants",
        "neuroncore_memory_usage_model_code",
        "neuroncore_memory_usage_model_shared_scratchpad",
        "neuroncore_memory_usage_runtime_memory",
        "neuroncore_memory_usage_tensors",
        "execution_errors_total",
        "execution_status_total",
        "execution_latency_seconds",
        "hardware_ecc_events_total",
        "system_vcpu_count",
        "system_vcpu_usage_ratio",
        "system_memory_total_bytes",
        "system_memory_used_bytes",
        "system_swap_total_bytes",
        "system_swap_used_bytes",
        "instance_info",
        "neuron_hardware_info",
    }
)


def _exposed_names() -> dict[str, frozenset[str]]:
    """Metric name -> label names, for every series name the extended families expose."""
    names: dict[str, frozenset[str]] = {}
    for fam in FAMILIES + PER_PROCESS_FAMILIES:
        labels = frozenset(fam.labels)
        if fam.kind == "histogram":
            names[f"{fam.name}_bucket"] = labels | {"le"}
            names[f"{fam.name}_count"] = labels
            names[f"{fam.name}_sum"] = labels
        else:
            names[fam.name] = labels
    return names


EXTENDED = _exposed_names()


def _fleet_contract() -> dict[str, tuple[str, frozenset[str]]]:
    """dashboards/README.md §Fleet metrics: metric name -> (type, label names)."""
    section = README.read_text().split("\n## Fleet metrics\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| (counter|gauge) \|([^|]*)\|", section, re.M)
    return {name: (kind, frozenset(re.findall(r"`(\w+)`", labels))) for name, kind, labels in rows}


CONTRACT = _fleet_contract()
# every series name a dashboard or alert may read, with the label names its family has
KNOWN = {**{name: labels for name, (_, labels) in CONTRACT.items()}, **EXTENDED}

# ------------------------------------------------------------------------------------------------ promtool


def _promtool() -> str:
    """promtool's path; a missing promtool fails under CI=true and skips (with the reason) elsewhere."""
    path = shutil.which("promtool")
    if path is None:
        reason = "promtool not found on PATH (Debian package 'prometheus', installed by .ci/run)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: {reason}")
        pytest.skip(reason)
    return path


def _run_promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_promtool(), *map(str, args)], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False
    )


def _assert_ok(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, f"{' '.join(proc.args)} failed:\n{proc.stdout}\n{proc.stderr}"


def test_missing_promtool_fails_in_ci_and_skips_elsewhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="promtool not found"):
        _promtool()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="promtool not found"):
        _promtool()


def test_prometheus_config_is_valid_and_rule_files_resolve() -> None:
    proc = _run_promtool("check", "config", DASH / "prometheus.yml")
    _assert_ok(proc)
    assert "SUCCESS: 2 rule files found" in proc.stdout + proc.stderr
    assert "alerts.yml" in proc.stdout + proc.stderr
    assert "fleet-alerts.yml" in proc.stdout + proc.stderr


def test_cluster_prometheus_config_is_valid_and_reads_the_cluster_targets() -> None:
    proc = _run_promtool("check", "config", CLUSTER_CONFIG)
    _assert_ok(proc)
    assert "SUCCESS: 2 rule files found" in proc.stdout + proc.stderr
    text = CLUSTER_CONFIG.read_text()
    assert re.findall(r"job_name:\s*(\S+)", text) == [CLUSTER_JOB]
    assert re.search(r"^\s+honor_labels: true$", text, re.M)
    patterns = re.findall(r"^\s+- (\S+\.json)$", text, re.M)
    # the default place of docs/cluster.md (uid 1000), and dashboards/targets/ for --file-sd
    default = "/run/user/1000/neuron-emulator-cluster/file_sd.json"
    assert default in (ROOT / "docs" / "cluster.md").read_text()
    assert any(fnmatch.fnmatch(default, p) for p in patterns), patterns
    assert any(fnmatch.fnmatch(str(DASH / "targets" / "cluster.json"), str(DASH / p)) for p in patterns), patterns
    assert (DASH / "targets" / ".gitignore").is_file()


def test_prometheus_config_jobs_and_ports() -> None:
    text = (DASH / "prometheus.yml").read_text()
    job = r"job_name:\s*(\S+)\s+scrape_interval:\s*5s\s+static_configs:\s+- targets:\s*\[\"(\S+)\"\]"
    jobs = dict(re.findall(job, text))
    assert jobs == {"neuron": "localhost:8000", "neuron-exporter": "localhost:8001"}
    compose = (ROOT / "docker-compose.yml").read_text()
    assert "neuron-monitor-prometheus --port 8000" in compose
    assert '"neuron-exporter", "--bind", "0.0.0.0", "--port", "8001"' in compose


def test_alert_rules_are_valid() -> None:
    _assert_ok(_run_promtool("check", "rules", *RULE_FILES))


def _rules_text() -> str:
    return "\n".join(path.read_text() for path in RULE_FILES)


def _alert_blocks() -> dict[str, str]:
    text = _rules_text()
    parts = re.split(r"^\s*- alert:\s*", text, flags=re.M)[1:]
    return {part.split("\n", 1)[0].strip(): part for part in parts}


def test_every_alert_has_for_severity_and_annotations() -> None:
    blocks = _alert_blocks()
    assert tuple(blocks) == ALERT_NAMES
    assert re.findall(r"^\s+- alert:\s*(\S+)", ALERTS.read_text(), re.M) == list(HOST_ALERTS)
    for name, block in blocks.items():
        assert re.search(r"^\s+for:\s*\d+[smh]\s*$", block, re.M), name
        assert re.search(r"^\s+severity:\s*(warning|critical)\s*$", block, re.M), name
        assert re.search(r"^\s+summary:\s*\S", block, re.M), name
        assert re.search(r"^\s+description:\s*\S", block, re.M), name


def test_alert_unit_tests_pass_and_cover_every_alert() -> None:
    assert sorted((DASH / "tests").glob("*.yml")) == sorted(ALERT_TESTS)
    proc = _run_promtool("test", "rules", *ALERT_TESTS)
    _assert_ok(proc)
    assert proc.stdout.count("SUCCESS") == len(ALERT_TESTS)
    text = "\n".join(path.read_text() for path in ALERT_TESTS)
    for name in ALERT_NAMES:
        # each alert is evaluated at least once with an expected firing alert
        assert re.search(rf"alertname: {name}\n\s+exp_alerts:\n\s+- exp_labels:", text), name
    fleet = ALERT_TESTS[1].read_text()
    for name in FLEET_ALERTS:
        # ... and, for the fleet rules, at least once where it must not (yet) fire
        assert re.search(rf"alertname: {name}\n\s+exp_alerts: \[\]", fleet), name


def test_fleet_alerts_select_cluster_targets_and_name_the_node() -> None:
    blocks = _alert_blocks()
    assert f'up{{job="{CLUSTER_JOB}"}} == 0' in blocks["NeuronNodeExporterDown"]
    assert f'neuron_exporter_source_up{{job="{CLUSTER_JOB}"}} == 0' in blocks["NeuronNodeDaemonDown"]
    # the single-host rule leaves cluster nodes to the node rules (no alert twice)
    assert f'neuron_exporter_source_up{{job!="{CLUSTER_JOB}"}} == 0' in blocks["NeuronExporterDown"]
    for name in FLEET_ALERTS:
        summary = re.search(r"^\s+summary: (.*)$", blocks[name], re.M)
        assert summary, name
        wanted = "$labels.job_id" if name == "NeuronJobStalled" else "$labels.node"
        assert wanted in summary.group(1), name


# ------------------------------------------------------------------------------------------------ PromQL

_TOKEN = re.compile(
    r"""
    (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<duration>(?:\d+(?:ms|[smhdwy]))+\b)
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<matchers>\{(?:"(?:\\.|[^"\\])*"|[^}"])*\})
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<space>\s+)
  | (?P<other>.)
    """,
    re.X | re.S,
)
_AGGREGATORS = frozenset(
    ("sum", "avg", "min", "max", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values", "group")
)
_GROUPING = frozenset(("by", "without", "on", "ignoring", "group_left", "group_right"))
_KEYWORDS = frozenset(("bool", "and", "or", "unless", "offset", "atan2")) | _AGGREGATORS | _GROUPING
_MATCHER = re.compile(r'\s*([A-Za-z_]\w*)\s*(=~|!~|!=|=)\s*"((?:\\.|[^"\\])*)"\s*,?')


def selectors(expr: str) -> list[tuple[str, dict[str, tuple[str, str]]]]:
    """Vector selectors of a PromQL expression: (metric name, {label: (op, value)})."""
    tokens = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(expr) if m.lastgroup != "space"]
    found: list[tuple[str, dict[str, tuple[str, str]]]] = []
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else (None, "")
        if kind == "ident" and text in _GROUPING and nxt[1] == "(":
            i = next(j for j in range(i + 2, len(tokens)) if tokens[j][1] == ")") + 1  # skip the label list
            continue
        if kind == "ident" and text not in _KEYWORDS and nxt[1] != "(":
            matchers: dict[str, tuple[str, str]] = {}
            if nxt[0] == "matchers":
                body = nxt[1][1:-1]
                pos = 0
                while pos < len(body):
                    m = _MATCHER.match(body, pos)
                    assert m, f"cannot read matchers {nxt[1]!r} in {expr!r}"
                    matchers[m.group(1)] = (m.group(2), m.group(3))
                    pos = m.end()
                i += 1
            found.append((text, matchers))
        i += 1
    return found


def test_selector_reader() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le) (rate(a_bucket{instance=~"$instance"}[1m]))) / 1e12 '
        '- on (job) group_left b{x="}", y!~"(m|n)_z"} unless c offset 5m'
    )
    assert selectors(expr) == [
        ("a_bucket", {"instance": ("=~", "$instance")}),
        ("b", {"x": ("=", "}"), "y": ("!~", "(m|n)_z")}),
        ("c", {}),
    ]


def _panels(dashboard: dict) -> list[dict]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))  # collapsed rows keep their panels inside
    return out


def _targets(dashboard: dict) -> list[tuple[dict, dict]]:
    return [(p, t) for p in _panels(dashboard) for t in p.get("targets", [])]


def _variable_selectors(dashboard: dict) -> list[str]:
    """The PromQL inside label_values(<selector>, label) / query_result(<expr>) variable queries."""
    out = []
    for var in dashboard["templating"]["list"]:
        if var["type"] != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", query, re.S) or re.fullmatch(
            r"\s*query_result\((.*)\)\s*", query, re.S
        )
        assert m, f"variable {var['name']}: unsupported query {query!r}"
        out.append(m.group(1))
    return out


def _all_expressions(dashboard: dict) -> list[str]:
    return [t["expr"] for _, t in _targets(dashboard)] + _variable_selectors(dashboard)


_GRAFANA_VALUES = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h", "__interval_ms": "15000"}


def _concrete(expr: str, variables: set[str]) -> str:
    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        if name in _GRAFANA_VALUES:
            return _GRAFANA_VALUES[name]
        assert name in variables, f"unknown template variable ${name} in {expr!r}"
        return ".*"

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]", value, expr)


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.parametrize("path", [COMPAT_JSON, FLEET_JSON], ids=lambda p: p.name)
def test_dashboard_json_is_valid_and_tidy(path: Path) -> None:
    text = path.read_text()
    dashboard = json.loads(text)
    assert text == json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n", "not 2-space tidy JSON"
    ids = [p["id"] for p in _panels(dashboard)]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    for panel in _panels(dashboard):
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "Prometheus"}, panel["title"]
            assert panel["targets"], panel["title"]
        for target in panel.get("targets", []):
            assert target["datasource"] == {"type": "prometheus", "uid": "Prometheus"}
            assert target["refId"] and target["expr"].strip()


def test_every_dashboard_expression_parses(tmp_path: Path) -> None:
    rules = []
    for path in (COMPAT_JSON, FLEET_JSON):
        dashboard = _load(path)
        variables = {v["name"] for v in dashboard["templating"]["list"]}
        for n, expr in enumerate(_all_expressions(dashboard)):
            rules.append({"record": f"dashboard:{path.stem.replace('-', '_')}:{n}", "expr": _concrete(expr, variables)})
    assert len(rules) > 40
    good = tmp_path / "dashboard_queries.yml"
    good.write_text(json.dumps({"groups": [{"name": "dashboards", "rules": rules}]}, indent=2))  # JSON is YAML
    _assert_ok(_run_promtool("check", "rules", good))
    # the check is not vacuous: a broken expression is reported
    bad = tmp_path / "broken.yml"
    bad.write_text(json.dumps({"groups": [{"name": "x", "rules": [{"record": "x:y", "expr": "sum(rate(a[1m])"}]}]}))
    assert _run_promtool("check", "rules", bad).returncode != 0


# ------------------------------------------------------------------------------------------ official

CPU = "avg(sum by (instance_id) (system_vcpu_usage_ratio))"
MEM = "avg(system_memory_used_bytes / system_memory_total_bytes)"
NC = "avg(neuroncore_utilization_ratio)"
OK = 'sum(rate(execution_status_total{status_type="completed"}[1m]))'
ERR = 'sum(rate(execution_status_total{status_type!="completed"}[1m]))'
RUNTIME_MEM = "avg by (memory_location) (sum by (instance_id, memory_location) (neuron_runtime_memory_used_bytes))"
# id: (type, title, unit, instant, [(expr, legendFormat or None)], (x, y, w, h))
OFFICIAL = {
    8: ("table", "Instance Info", None, True, [("instance_info", None)], (0, 0, 24, 8)),
    36: ("stat", "Instance Count", None, False, [("count(instance_info)\n", None)], (0, 8, 3, 5)),
    10: ("stat", "vCPU Count", "none", True, [("sum (system_vcpu_count)", None)], (3, 8, 3, 5)),
    20: ("gauge", "vCPU Utilization", "percentunit", True, [(CPU, None)], (6, 8, 3, 5)),
    16: ("gauge", "Host Memory Usage", "percentunit", True, [(MEM, None)], (9, 8, 3, 5)),
    12: ("stat", "NeuronCores in Use", None, True, [("count(neuroncore_utilization_ratio > 0)", None)], (12, 8, 3, 5)),
    4: ("gauge", "NeuronCore Utilization", "percentunit", True, [(NC, None)], (15, 8, 3, 5)),
    6: ("stat", "Execution Success Rate", "cps", True, [(OK, None)], (18, 8, 3, 5)),
    18: ("stat", "Execution Error Rate", "cps", True, [(ERR, None)], (21, 8, 3, 5)),
    32: (
        "graph",
        "Execution Status Rates",
        "short",
        False,
        [(OK, "Execution Success Rate"), (ERR, "Execution Error Rate")],
        (0, 13, 12, 12),
    ),
    34: (
        "graph",
        "Execution Latency",
        "s",
        False,
        [("avg by (percentile) (execution_latency_seconds)", "{{percentile}}")],
        (12, 13, 12, 12),
    ),
    30: (
        "graph",
        "NeuronCore Utilization",
        "percentunit",
        False,
        [("avg by (neuroncore) (neuroncore_utilization_ratio)", "nc{{neuroncore}}")],
        (0, 25, 8, 12),
    ),
    2: (
        "graph",
        "Neuron Runtime vCPU Usage",
        "percentunit",
        False,
        [("avg by (usage_type) (neuron_runtime_vcpu_usage_ratio)", "Neuron Runtime {{usage_type}} CPU usage ")],
        (8, 25, 8, 12),
    ),
    28: (
        "graph",
        "Neuron Runtime Used Memory",
        "bytes",
        False,
        [(RUNTIME_MEM, "{{memory_location}}")],
        (16, 25, 8, 12),
    ),
    22: (
        "graph",
        "Host System Utilization",
        "percentunit",
        False,
        [(MEM, "Memory Usage"), (CPU, "vCPU Usage"), (NC, "NeuronCore Usage")],
        (0, 37, 8, 12),
    ),
    24: (
        "graph",
        "Host vCPU Usage",
        "percentunit",
        False,
        [("avg by (usage_type) (system_vcpu_usage_ratio)", "{{usage_type}}")],
        (8, 37, 8, 12),
    ),
    26: (
        "graph",
        "Host Memory Usage",
        "percentunit",
        False,
        [(MEM, "Memory Usage Percent"), ("avg(system_memory_used_bytes)", "Memory Usage Bytes")],
        (16, 37, 8, 12),
    ),
}
STACKED = {2, 24}


def _unit(panel: dict) -> str | None:
    if "yaxes" in panel:  # legacy graph panel
        return panel["yaxes"][0].get("format")
    return panel.get("fieldConfig", {}).get("defaults", {}).get("unit")


def test_compatible_dashboard_is_the_official_one() -> None:
    d = _load(COMPAT_JSON)
    assert (d["uid"], d["title"], d["refresh"]) == ("EqWNYf5Mz", "neuron-monitor", "5s")
    assert d["time"] == {"from": "now-6h", "to": "now"}
    assert d["tags"] == []
    [variable] = d["templating"]["list"]
    assert (variable["name"], variable["type"], variable["filters"]) == ("Filters", "adhoc", [])
    assert variable["datasource"] in ("Prometheus", {"type": "prometheus", "uid": "Prometheus"})
    panels = {p["id"]: p for p in d["panels"]}
    assert set(panels) == set(OFFICIAL)
    assert [p["id"] for p in d["panels"]] == list(OFFICIAL)  # the official order
    for pid, (kind, title, unit, instant, queries, (x, y, w, h)) in OFFICIAL.items():
        panel = panels[pid]
        assert panel["type"] in ({"graph", "timeseries"} if kind == "graph" else {kind}), pid
        assert panel["title"] == title, pid
        assert _unit(panel) == unit, pid
        assert panel["gridPos"] == {"h": h, "w": w, "x": x, "y": y}, pid
        got = [(t["expr"], t.get("legendFormat") or None) for t in panel["targets"]]
        if kind == "graph":
            assert got == queries, pid
        else:
            assert [e for e, _ in got] == [e for e, _ in queries], pid
        assert all(bool(t.get("instant")) == instant for t in panel["targets"]), pid
        if kind == "graph" and panel["type"] == "timeseries":
            stacking = panel["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"]
            assert (stacking == "normal") == (pid in STACKED), pid
    table = panels[8]
    assert table["targets"][0]["format"] == "table"
    organize = table["transformations"][0]["options"]
    assert organize["renameByName"]["instance_id"] == "Instance ID"
    assert {k for k, v in organize["excludeByName"].items() if v} == {"Time", "Value", "__name__", "instance", "job"}
    # Host Memory Usage: bytes on the right axis
    overrides = json.dumps(panels[26]["fieldConfig"]["overrides"])
    assert '"bytes"' in overrides and '"right"' in overrides


def test_compatible_dashboard_uses_only_official_metric_names() -> None:
    names = {name for expr in _all_expressions(_load(COMPAT_JSON)) for name, _ in selectors(expr)}
    assert names and names <= COMPAT_METRICS, names - COMPAT_METRICS


# ------------------------------------------------------------------------------------------------ fleet


def _alert_expressions() -> list[str]:
    exprs = []
    lines = _rules_text().splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"(\s*)expr:\s*(.*)$", line)
        if not m:
            continue
        if m.group(2) not in ("|", ">", "|-", ">-"):
            exprs.append(m.group(2))
            continue
        indent, body = len(m.group(1)), []
        for nxt in lines[i + 1 :]:
            if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                break
            body.append(nxt)
        exprs.append("\n".join(body))
    return exprs


def test_alert_expressions_are_found() -> None:
    exprs = _alert_expressions()
    assert len(exprs) == len(ALERT_NAMES)
    names = {name for expr in exprs for name, _ in selectors(expr)}
    # both sources of each condition, as the alerts promise
    assert {"neuron_executions_total", "execution_errors_total", "neuron_ecc_events_total"} <= names
    assert {"hardware_ecc_events_total", "up", "neuron_exporter_source_up", "neuroncore_in_use"} <= names
    assert {"neuron_execution_errors_total", "neuroncore_busy_seconds_total", "neuron_collective_bytes_total"} <= names


def test_fleet_contract_is_documented_and_agrees_with_fields() -> None:
    """The README's contract names the new families; where fields.py already has one, they agree."""
    assert set(CONTRACT) == {
        "neuron_collective_seconds_total",
        "neuron_job_steps_total",
        "neuron_job_step_seconds_total",
        "neuron_job_samples_total",
        "neuron_collective_wait_seconds_total",
        "neuron_efa_bandwidth_factor",
    }
    for name, (kind, labels) in CONTRACT.items():
        assert name not in COMPAT_METRICS, name
        assert (kind == "counter") == name.endswith("_total"), name
        family = BY_NAME.get(name)
        if family is not None:  # implemented: the contract is what the exporter serves
            assert (family.kind, frozenset(family.labels)) == (kind, labels), name
    used = {n for e in _all_expressions(_load(FLEET_JSON)) + _alert_expressions() for n, _ in selectors(e)}
    assert set(CONTRACT) <= used, set(CONTRACT) - used  # no stale row


@pytest.mark.parametrize("source", ["trn1-fleet.json", "alert rules"])
def test_metric_names_are_exported(source: str) -> None:
    exprs = _all_expressions(_load(FLEET_JSON)) if source.endswith(".json") else _alert_expressions()
    names = {name for expr in exprs for name, _ in selectors(expr)}
    unknown = names - set(KNOWN) - COMPAT_METRICS - {"up"}
    assert not unknown, f"{source} uses metric names no exporter serves: {sorted(unknown)}"
    for expr in exprs:  # label names used in matchers exist on the family or the scrape target
        for name, matchers in selectors(expr):
            if name in KNOWN:
                allowed = KNOWN[name] | TARGET_LABELS
                assert set(matchers) <= allowed, f"{name}: {sorted(set(matchers) - allowed)} in {expr!r}"


def test_fleet_dashboard_variables_and_schema() -> None:
    d = _load(FLEET_JSON)
    assert d["schemaVersion"] >= 39
    assert d["uid"] != "EqWNYf5Mz"
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert list(variables) == list(FILTER_LABELS)
    for var in variables.values():
        assert var["type"] == "query" and var["multi"] and var["includeAll"], var["name"]
        assert var["allValue"] == ".*", var["name"]  # also matches series without the label (a single host)
    node_query = variables["node"]["query"]["query"]
    m = re.fullmatch(r"label_values\((\w+), node\)", node_query)
    assert m and m.group(1) in EXTENDED, node_query
    instance_query = variables["instance"]["query"]["query"]
    assert instance_query == f'label_values({m.group(1)}{{node=~"$node"}}, instance)', instance_query
    types = {p["type"] for p in _panels(d)}
    assert types <= {"row", "timeseries", "stat", "gauge", "table"}, types


# the fleet dashboard's variables, in order
FILTER_LABELS = ("node", "instance", "neuron_device", "neuroncore", "job_id")


def _unfiltered(expr: str, labels: tuple[str, ...]) -> list[str]:
    """'metric: label' for each selector in expr lacking label=~"$label" although its family has the label."""
    missing = []
    for name, matchers in selectors(expr):
        has = KNOWN.get(name, frozenset()) | {"instance", "node"}  # target labels on every series
        missing += [f"{name}: {lab}" for lab in labels if lab in has and matchers.get(lab) != ("=~", f"${lab}")]
    return missing


def test_every_fleet_query_honours_the_template_variables() -> None:
    d = _load(FLEET_JSON)
    for panel, target in _targets(d):
        assert not _unfiltered(target["expr"], FILTER_LABELS), (panel["title"], target["expr"])
    # each variable's own query is filtered by the variables before it
    for n, expr in enumerate(_variable_selectors(d)):
        assert not _unfiltered(expr, FILTER_LABELS[:n]), expr


def test_fleet_dashboard_covers_the_brief() -> None:
    d = _load(FLEET_JSON)
    exprs = [t["expr"] for _, t in _targets(d)]
    joined = "\n".join(exprs)
    for needle in (
        "rate(neuroncore_busy_seconds_total{",
        "rate(neuroncore_engine_busy_seconds_total{",
        "rate(neuroncore_flops_total{",
        "/ 1e12",
        "neurondevice_hbm_used_bytes{",
        "neurondevice_hbm_total_bytes{",
        "rate(neuron_executions_total{",
        "histogram_quantile(0.5, sum by (le) (rate(neuron_execution_latency_seconds_bucket{",
        "histogram_quantile(0.99, sum by (le) (rate(neuron_execution_latency_seconds_bucket{",
        "rate(neuron_compile_cache_hits_total{",
        "rate(neuron_compile_cache_misses_total{",
        "sum by (link_type) (rate(neuron_collective_bytes_total{",
        "neuron_host_cpu_seconds_total{",
        "neuron_host_memory_used_bytes{",
        "up{",
        "neuron_exporter_source_up{",
        # job and node views (issue 12): throughput, per-node step time and wait, EFA, HBM headroom, straggler
        "max by (job_id) (rate(neuron_job_samples_total{",
        "rate(neuron_job_step_seconds_total{",
        "rate(neuron_collective_wait_seconds_total{",
        'rate(neuron_collective_bytes_total{node=~"$node", instance=~"$instance", link_type="efa"}',
        "neuron_efa_bandwidth_factor{",
        "min without (neuron_device) (neurondevice_hbm_total_bytes{",
        "topk by (job_id) (1, ",
    ):
        assert needle in joined, needle
    hbm = [p for p in _panels(d) if "neurondevice_hbm_total_bytes" in json.dumps(p.get("targets"))]
    assert any(p.get("repeat") == "neuron_device" for p in hbm), "HBM per device with capacity line"


# Series one neuron-exporter would serve (names and labels of fields.py), for evaluating the fleet queries.
_A = 'instance="trn1-a:8001",job="neuron-exporter"'
FLEET_SERIES = {
    f'neuroncore_busy_seconds_total{{{_A},neuron_device="0",neuroncore="0"}}': "0+30x20",  # 50 % busy
    f'neuroncore_busy_seconds_total{{{_A},neuron_device="0",neuroncore="1"}}': "0+60x20",  # 100 % busy
    f'neuroncore_engine_busy_seconds_total{{{_A},neuron_device="0",neuroncore="0",engine="tensor"}}': "0+15x20",
    f'neuroncore_engine_busy_seconds_total{{{_A},neuron_device="0",neuroncore="1",engine="tensor"}}': "0+45x20",
    f'neuroncore_flops_total{{{_A},neuron_device="0",neuroncore="0"}}': "0+6e13x20",  # 1 TFLOP/s
    f'neuroncore_flops_total{{{_A},neuron_device="0",neuroncore="1"}}': "0+1.2e14x20",  # 2 TFLOP/s
    f'neuroncore_in_use{{{_A},neuron_device="0",neuroncore="0"}}': "1x20",
    f'neuroncore_in_use{{{_A},neuron_device="0",neuroncore="1"}}': "1x20",
    f'neurondevice_hbm_used_bytes{{{_A},neuron_device="0",category="tensors"}}': "17179869184x20",
    f'neurondevice_hbm_used_bytes{{{_A},neuron_device="0",category="constants"}}': "8589934592x20",
    f'neurondevice_hbm_total_bytes{{{_A},neuron_device="0"}}': "34359738368x20",
    f'neuron_executions_total{{{_A},outcome="completed"}}': "0+60x20",
    f'neuron_executions_total{{{_A},outcome="completed_with_num_err"}}': "0+6x20",
    f'neuron_execution_latency_seconds_bucket{{{_A},le="0.05"}}': "0+30x20",
    f'neuron_execution_latency_seconds_bucket{{{_A},le="0.1"}}': "0+60x20",
    f'neuron_execution_latency_seconds_bucket{{{_A},le="+Inf"}}': "0+60x20",
    f"neuron_execution_latency_seconds_sum{{{_A}}}": "0+3x20",
    f"neuron_execution_latency_seconds_count{{{_A}}}": "0+60x20",
    f"neuron_compile_cache_hits_total{{{_A}}}": "0+120x20",
    f"neuron_compile_cache_misses_total{{{_A}}}": "0+6x20",
    f'neuron_collective_bytes_total{{{_A},link_type="neuronlink"}}': "0+6e10x20",
    f'neuron_host_cpu_seconds_total{{{_A},mode="idle"}}': "0+45x20",
    f'neuron_host_cpu_seconds_total{{{_A},mode="user"}}': "0+15x20",
    f"neuron_host_memory_used_bytes{{{_A}}}": "8e9x20",
    f'neuron_exporter_source_up{{{_A},source="daemon"}}': "1x20",
    f"up{{{_A}}}": "1x20",
}
# (panel title, refId) -> expected samples at 10 m: (labels, value)
FLEET_EXPECTED = {
    ("NeuronCore utilization", "A"): [
        (f'{{{_A},neuron_device="0",neuroncore="0"}}', 0.5),
        (f'{{{_A},neuron_device="0",neuroncore="1"}}', 1.0),
    ],
    ("Engine utilization", "A"): [('{engine="tensor"}', 0.5)],
    ("Compute", "A"): [("{}", 3.0)],
    ("Compute per NeuronCore", "A"): [
        (f'{{{_A},neuron_device="0",neuroncore="0"}}', 1.0),
        (f'{{{_A},neuron_device="0",neuroncore="1"}}', 2.0),
    ],
    ("NeuronCores in use", "A"): [("{}", 2.0)],
    ("HBM used", "A"): [("{}", 0.75)],
    ("HBM used per device", "A"): [(f'{{{_A},neuron_device="0"}}', 0.75)],
    ("HBM by category, device $neuron_device", "A"): [
        ('{category="constants"}', 8589934592.0),
        ('{category="tensors"}', 17179869184.0),
    ],
    ("HBM by category, device $neuron_device", "B"): [("{}", 34359738368.0)],
    ("Executions by outcome", "A"): [('{outcome="completed"}', 1.0), ('{outcome="completed_with_num_err"}', 0.1)],
    ("Failed executions", "A"): [("{}", 0.1)],
    ("Execution latency", "A"): [("{}", 0.05)],
    ("Execution latency", "C"): [("{}", 0.05)],
    ("Compile cache", "A"): [("{}", 2.0)],
    ("Compile cache", "B"): [("{}", 0.1)],
    ("Collective bandwidth", "A"): [('{link_type="neuronlink"}', 1e9)],
    ("Host CPU utilization", "A"): [('{instance="trn1-a:8001"}', 0.25)],
    ("Exporter up", "A"): [(f"up{{{_A}}}", 1.0)],
    ("Daemon reachable", "A"): [('{instance="trn1-a:8001"}', 1.0)],
}


def _evaluate_fleet_queries(tmp_path: Path, series: dict[str, str], expected: dict) -> None:
    """Evaluates the fleet dashboard's own queries with promtool at 10 m on the given input series."""
    d = _load(FLEET_JSON)
    variables = {v["name"] for v in d["templating"]["list"]}
    exprs = {(p["title"], t["refId"]): _concrete(t["expr"], variables) for p, t in _targets(d)}
    cases = [
        {
            "expr": exprs[key],
            "eval_time": "10m",
            "exp_samples": [{"labels": labels, "value": value} for labels, value in samples],
        }
        for key, samples in expected.items()
    ]
    test = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": k, "values": v} for k, v in series.items()],
                "promql_expr_test": cases,
            }
        ],
    }
    path = tmp_path / "fleet_test.yml"
    path.write_text(json.dumps(test, indent=2))
    _assert_ok(_run_promtool("test", "rules", path))


def test_fleet_queries_compute_the_right_numbers(tmp_path: Path) -> None:
    """The fleet dashboard's own queries, evaluated by promtool on exporter-shaped series."""
    _evaluate_fleet_queries(tmp_path, FLEET_SERIES, FLEET_EXPECTED)


def _node(i: int) -> str:
    """The target labels of cluster node i, as prometheus-cluster.yml's file_sd gives them."""
    return (
        f'instance="127.0.0.1:4100{i}",instance_id="i-0c0ffee000000000{i}",job="{CLUSTER_JOB}",'
        f'node="{i}",placement_group="pg-a"'
    )


_N0, _N1, _N2 = _node(0), _node(1), _node(2)
# Three nodes of one exporter each. Job llama runs on all three in lockstep: 1 step/s, 1 s per step, 64
# sequences per step; node 2 (the straggler) takes the whole second itself, never waits and has no wait
# series; nodes 0 and 1 take 0.625 s of their own and wait 0.375 s per step in collectives (own + wait =
# the job's step: docs/multinode.md). Node 0: two Neuron devices (24 and 8 of 32 GiB used), two cores held,
# EFA 1 GB/s achieved; node 1: EFA factor 0.5 and a quarter of node 0's EFA bandwidth.
CLUSTER_SERIES = {
    **{f'neuron_job_steps_total{{{n},job_id="llama"}}': "0+60x20" for n in (_N0, _N1, _N2)},
    **{f'neuron_job_step_seconds_total{{{n},job_id="llama"}}': "0+37.5x20" for n in (_N0, _N1)},
    f'neuron_job_step_seconds_total{{{_N2},job_id="llama"}}': "0+60x20",
    **{f'neuron_job_samples_total{{{n},job_id="llama"}}': "0+3840x20" for n in (_N0, _N1, _N2)},
    **{f'neuron_collective_wait_seconds_total{{{n},job_id="llama"}}': "0+22.5x20" for n in (_N0, _N1)},
    **{f"up{{{n}}}": "1x20" for n in (_N0, _N1, _N2)},
    **{f'neuron_exporter_source_up{{{n},source="daemon"}}': "1x20" for n in (_N0, _N1, _N2)},
    f"neuron_efa_bandwidth_factor{{{_N0}}}": "1x20",
    f"neuron_efa_bandwidth_factor{{{_N1}}}": "0.5x20",
    f'neuron_collective_bytes_total{{{_N0},link_type="efa"}}': "0+6e10x20",
    f'neuron_collective_seconds_total{{{_N0},link_type="efa"}}': "0+60x20",
    f'neuron_collective_bytes_total{{{_N1},link_type="efa"}}': "0+1.5e10x20",
    f'neuron_collective_seconds_total{{{_N1},link_type="efa"}}': "0+60x20",
    f'neuron_collective_bytes_total{{{_N0},link_type="neuronlink"}}': "0+6e12x20",
    f'neuron_collective_seconds_total{{{_N0},link_type="neuronlink"}}': "0+30x20",
    f'neurondevice_hbm_used_bytes{{{_N0},neuron_device="0",category="tensors"}}': "17179869184x20",
    f'neurondevice_hbm_used_bytes{{{_N0},neuron_device="0",category="constants"}}': "8589934592x20",
    f'neurondevice_hbm_used_bytes{{{_N0},neuron_device="1",category="tensors"}}': "8589934592x20",
    f'neurondevice_hbm_total_bytes{{{_N0},neuron_device="0"}}': "34359738368x20",
    f'neurondevice_hbm_total_bytes{{{_N0},neuron_device="1"}}': "34359738368x20",
    f'neuroncore_in_use{{{_N0},neuron_device="0",neuroncore="0"}}': "1x20",
    f'neuroncore_in_use{{{_N0},neuron_device="0",neuroncore="1"}}': "1x20",
    f'neuroncore_busy_seconds_total{{{_N0},neuron_device="0",neuroncore="0"}}': "0+30x20",
    f'neuroncore_busy_seconds_total{{{_N0},neuron_device="0",neuroncore="1"}}': "0+60x20",
}


def _row(i: int) -> str:
    """The labels of node i's row in the Nodes table."""
    return f'{{instance="127.0.0.1:4100{i}",instance_id="i-0c0ffee000000000{i}",node="{i}"}}'


CLUSTER_EXPECTED = {
    ("Job throughput", "A"): [('{job_id="llama"}', 64.0)],
    ("Job step time", "A"): [('{job_id="llama"}', 1.0)],
    ("Job step time", "B"): [('{job_id="llama"}', 0.75)],  # the nodes' own step time, on average
    ("Jobs", "A"): [('{job_id="llama"}', 3.0)],
    ("Jobs", "B"): [('{job_id="llama"}', 64.0)],
    ("Jobs", "C"): [('{job_id="llama"}', 1.0)],
    ("Jobs", "D"): [('{job_id="llama"}', 1.0)],
    ("Jobs", "E"): [('{job_id="llama"}', 0.25)],  # node 2 waits 0
    ("Straggler", "A"): [(f'{{{_N2},job_id="llama"}}', 0.375)],
    ("Step time per node", "A"): [
        (f'{{{_N0},job_id="llama"}}', 0.625),
        (f'{{{_N1},job_id="llama"}}', 0.625),
        (f'{{{_N2},job_id="llama"}}', 1.0),  # the straggler's own time is the job's step
    ],
    ("Collective wait per node", "A"): [(f'{{{n},job_id="llama"}}', 0.375) for n in (_N0, _N1)],
    ("EFA bandwidth per node", "A"): [(f"{{{_N0}}}", 1e9), (f"{{{_N1}}}", 2.5e8)],
    ("EFA achieved bandwidth per node", "A"): [(f"{{{_N0}}}", 1e9), (f"{{{_N1}}}", 2.5e8)],
    ("EFA bandwidth factor", "A"): [
        (f"neuron_efa_bandwidth_factor{{{_N0}}}", 1.0),
        (f"neuron_efa_bandwidth_factor{{{_N1}}}", 0.5),
    ],
    ("HBM headroom per node", "A"): [(f"{{{_N0}}}", 8589934592.0)],
    ("HBM free per node", "A"): [(f"{{{_N0}}}", 0.5)],
    ("NeuronCore utilization per node", "A"): [(f"{{{_N0}}}", 0.75)],
    ("NeuronCore utilization per node", "B"): [(f"{{{_N0}}}", 1.0)],
    ("Nodes", "A"): [(_row(i), 1.0) for i in (0, 1, 2)],
    ("Nodes", "B"): [(_row(i), 1.0) for i in (0, 1, 2)],
    ("Nodes", "C"): [(_row(0), 2.0)],
    ("Nodes", "D"): [(_row(0), 0.75)],
    ("Nodes", "E"): [(_row(0), 0.5)],
    ("Nodes", "F"): [(_row(0), 1.0), (_row(1), 0.5)],
}


def test_fleet_job_and_node_queries_compute_the_right_numbers(tmp_path: Path) -> None:
    """The Jobs and Nodes rows on cluster-shaped series (target labels, job and EFA families)."""
    d = _load(FLEET_JSON)
    rows = {p["title"]: p["gridPos"]["y"] for p in d["panels"] if p["type"] == "row"}
    new = [p for p in _panels(d) if p["type"] != "row" and rows["Jobs"] < p["gridPos"]["y"] < rows["NeuronCores"]]
    assert {(p["title"], t["refId"]) for p in new for t in p["targets"]} == set(CLUSTER_EXPECTED)  # all checked
    _evaluate_fleet_queries(tmp_path, CLUSTER_SERIES, CLUSTER_EXPECTED)


# ------------------------------------------------------------------------------------------------ Grafana


def test_grafana_provisioning_matches_dashboards_and_compose() -> None:
    prov = DASH / "grafana" / "provisioning"
    datasource = (prov / "datasources" / "prometheus.yml").read_text()
    assert re.search(r"^\s+- name: Prometheus$", datasource, re.M)
    assert re.search(r"^\s+uid: Prometheus$", datasource, re.M)
    assert re.search(r"^\s+type: prometheus$", datasource, re.M)
    provider = (prov / "dashboards" / "neuron.yml").read_text()
    m = re.search(r"^\s+path: (\S+)$", provider, re.M)
    assert m
    compose = (ROOT / "docker-compose.yml").read_text()
    assert f"./dashboards:{m.group(1)}:ro" in compose
    assert "./dashboards/grafana/provisioning:/etc/grafana/provisioning:ro" in compose
    assert "--config.file=/etc/neurontools/dashboards/prometheus.yml" in compose
