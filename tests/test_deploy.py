"""The deployment files (docs/kubernetes.md): the Kubernetes manifests of deploy/k8s/ and the
N-node docker compose stack, checked without a cluster and without Docker.

* every Kubernetes object is validated against the Kubernetes 1.30 OpenAPI schemas in strict mode
  (unknown fields are errors), bundled by the pinned ``kubernetes-validate`` package (offline);
* on top of the schema, what a schema cannot see: selectors match the pod labels, Service ports
  name container ports, the scrape annotations name the exporter's port, every command line of
  our image parses with the tools' own argument parsers (after Kubernetes' ``$(VAR)`` and
  compose's ``${VAR:-default}`` expansion), the monitor configuration parses and enables
  ``k8s_info``, the socket path every container uses is on the shared volume, training pods pass
  their pod identity in the variables the runtime reads;
* the compose stack's Prometheus configuration passes ``promtool check config`` and reads the
  target file the cluster writes.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import kubernetes_validate
import pytest
import yaml

from emulator.cli import build_parser as emulator_parser
from emulator.cluster.layout import Layout
from emulator.hardware.instance_types import INSTANCE_TYPES
from emulator.runtime.attach import CONTAINER_NAME_ENV, POD_NAME_ENV, POD_NAMESPACE_ENV
from neurontools.contract.schema import K8S_INFO
from neurontools.exporter import cli as exporter_cli
from neurontools.exporter import compat_cli
from neurontools.monitor import cli as monitor_cli
from neurontools.monitor.config import parse_config

ROOT = Path(__file__).parents[1]
K8S = ROOT / "deploy" / "k8s"
COMPOSE = ROOT / "docker-compose.cluster.yml"
KUBERNETES_VERSION = "1.30.0"  # native sidecar containers (initContainers[].restartPolicy) are on from 1.29
PROMTOOL = shutil.which("promtool")
IMAGE = "neurontools:local"


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def objects() -> dict[tuple[str, str], dict[str, Any]]:
    """Every object of deploy/k8s/ by (kind, name)."""
    found = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in documents(path):
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in found, f"{key} defined twice"
            found[key] = doc
    return found


def pod_spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]


def containers(obj: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    spec = pod_spec(obj)
    yield from spec.get("initContainers", [])
    yield from spec["containers"]


def container(obj: Mapping[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in containers(obj) if c["name"] == name)


def env_of(c: Mapping[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in c.get("env", [])}


def expand_k8s(text: str, c: Mapping[str, Any]) -> str:
    """Kubernetes' ``$(VAR)`` expansion in command and args; a variable from the downward API
    stands as ``<fieldPath>``. Every reference must be defined (Kubernetes would leave it as is)."""
    env = env_of(c)

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        assert name in env, f"container {c['name']}: $({name}) is not in its env"
        entry = env[name]
        if "value" in entry:
            return str(entry["value"])
        return f"<{entry['valueFrom']['fieldRef']['fieldPath']}>"

    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", one, text)


def parse_command(argv: list[str]) -> Any:
    """Parse a command line of our image with the tool's own parser (raises on a bad flag)."""
    tool, rest = PurePosixPath(argv[0]).name, argv[1:]
    if tool == "neuron-emulator":
        return emulator_parser().parse_args(rest)
    if tool == "neuron-exporter":
        return exporter_cli.parse_args(rest)
    if tool == "neuron-monitor":
        return monitor_cli.parse_args(rest)
    if tool == "neuron-monitor-prometheus":
        return compat_cli.parse_args(rest)
    raise AssertionError(f"not a command of the image: {argv}")


def command_lines(c: Mapping[str, Any]) -> list[list[str]]:
    """The tool command lines a container runs: its command + args, or each stage of a
    ``/bin/sh -c`` pipeline."""
    argv = [expand_k8s(str(a), c) for a in [*c.get("command", []), *c.get("args", [])]]
    if argv[:2] == ["/bin/sh", "-c"]:
        return [shlex.split(stage) for stage in argv[2].split("|")]
    return [argv]


# -- schema ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(K8S.glob("*.yaml")), ids=lambda p: p.name)
def test_manifests_match_the_kubernetes_schema(path: Path) -> None:
    docs = documents(path)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_schema_check_catches_a_mistake() -> None:
    daemonset = objects()["DaemonSet", "neuron-emulator"]
    broken = yaml.safe_load(yaml.safe_dump(daemonset))
    pod_spec(broken)["containers"][0]["ports"][0]["containerPort"] = "8000"  # a string
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)
    pod_spec(broken)["hostPid"] = True  # misspelt field: strict mode refuses it
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


# -- what the schema cannot see ---------------------------------------------------------------------


def test_daemonset_service_and_scrape_annotations_fit_together() -> None:
    objs = objects()
    daemonset, service = objs["DaemonSet", "neuron-emulator"], objs["Service", "neuron-emulator"]
    namespace = daemonset["metadata"]["namespace"]
    assert ("Namespace", namespace) in objs
    assert service["metadata"]["namespace"] == namespace

    labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert daemonset["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()

    ports = {p["name"]: p["containerPort"] for c in containers(daemonset) for p in c.get("ports", [])}
    assert len(ports) == len(set(ports.values()))
    for port in service["spec"]["ports"]:
        assert ports[port["targetPort"]] == port["port"], port

    # Prometheus scrapes neuron-exporter, which listens on all addresses at that port
    annotations = daemonset["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    exporter = container(daemonset, "neuron-exporter")
    opts = parse_command(command_lines(exporter)[0])
    assert int(annotations["prometheus.io/port"]) == opts.port == ports["exporter"]
    assert annotations["prometheus.io/path"] == "/metrics"
    assert opts.bind == "0.0.0.0" and opts.enable_k8s_info
    for probe in ("readinessProbe", "livenessProbe"):
        assert exporter[probe]["httpGet"]["port"] == "exporter"
        assert exporter[probe]["httpGet"]["path"] in ("/readyz", "/healthz")


def test_every_command_parses_with_the_tools_own_parsers() -> None:
    objs = objects()
    seen = set()
    for obj in objs.values():
        if "template" not in obj.get("spec", {}):
            continue
        for c in containers(obj):
            assert c["image"] == IMAGE
            for argv in command_lines(c):
                parse_command(argv)  # raises UsageError on a flag the tool does not have
                seen.add(PurePosixPath(argv[0]).name)
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                if "exec" in c.get(probe, {}):
                    parse_command(c[probe]["exec"]["command"])
    assert seen == {"neuron-emulator", "neuron-monitor", "neuron-monitor-prometheus", "neuron-exporter"}


def test_the_emulated_instance_and_its_socket() -> None:
    objs = objects()
    daemonset = objs["DaemonSet", "neuron-emulator"]
    spec = pod_spec(daemonset)
    emulator = container(daemonset, "emulator")
    assert emulator["restartPolicy"] == "Always"  # a sidecar: the tools start once it answers
    args = parse_command(command_lines(emulator)[0])
    assert args.command == "up" and args.instance_type in INSTANCE_TYPES
    assert args.instance_name == "<spec.nodeName>"

    # scheduled on Trn1 nodes only (the real neuron-monitor DaemonSet's affinity, Trn1 types)
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    types = next(e["values"] for e in term["matchExpressions"] if e["key"] == "node.kubernetes.io/instance-type")
    assert args.instance_type in types and set(types) <= set(INSTANCE_TYPES)

    # every container reaches the daemon's socket on the node's shared directory, in the node's PID namespace
    socket = PurePosixPath(args.socket)
    host_dirs = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    for obj in (daemonset, objs["Job", "gpt-tiny-train"]):
        assert pod_spec(obj)["hostPID"] is True
        volumes = {v["name"]: v for v in pod_spec(obj)["volumes"]}
        for c in containers(obj):
            assert env_of(c)["NEURON_EMULATOR_ADDR"]["value"] == str(socket), c["name"]
            mount = next(m for m in c["volumeMounts"] if m["mountPath"] == str(socket.parent))
            assert volumes[mount["name"]]["hostPath"]["path"] in host_dirs.values(), c["name"]


def test_the_monitor_configuration_enables_k8s_info() -> None:
    objs = objects()
    daemonset, config_map = objs["DaemonSet", "neuron-emulator"], objs["ConfigMap", "neuron-monitor-config"]
    monitor = container(daemonset, "neuron-monitor")
    monitor_argv, prometheus_argv = command_lines(monitor)
    path = PurePosixPath(parse_command(monitor_argv).config_file)
    mount = next(m for m in monitor["volumeMounts"] if m["mountPath"] == str(path.parent))
    volume = next(v for v in pod_spec(daemonset)["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    config = parse_config(config_map["data"][path.name])
    assert K8S_INFO in {g.type for g in config.system_metrics}
    assert parse_command(prometheus_argv).enable_k8s_info


def test_training_pods_pass_their_pod_identity() -> None:
    job = objects()["Job", "gpt-tiny-train"]
    (trainer,) = containers(job)
    env = env_of(trainer)
    assert env[POD_NAME_ENV]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env[POD_NAMESPACE_ENV]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env[CONTAINER_NAME_ENV]["value"] == trainer["name"]
    assert trainer["resources"]["limits"]["aws.amazon.com/neuroncore"] == env["NEURON_RT_NUM_CORES"]["value"]
    args = parse_command(command_lines(trainer)[0])
    assert args.command == "run"


# -- docker compose: an N-node stack ----------------------------------------------------------------


def expand_compose(value: str) -> str:
    """Compose's ``${VAR:-default}`` with the defaults (the variables unset)."""

    def one(match: re.Match[str]) -> str:
        assert match.group(2) is not None, f"${{{match.group(1)}}} has no default"
        return match.group(2)

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}", one, value)


def compose_services() -> dict[str, dict[str, Any]]:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def mounts(service: Mapping[str, Any]) -> dict[str, str]:
    """Mount path in the container -> source (a named volume or a path in the repository)."""
    out = {}
    for spec in service.get("volumes", []):
        source, target = spec.split(":")[:2]
        out[target] = source
    return out


def in_repo(service: Mapping[str, Any], path: str) -> Path:
    """The repository file a bind mount of ``service`` shows at ``path``."""
    for target, source in mounts(service).items():
        if source.startswith("./") and path.startswith(target + "/"):
            return ROOT / source / path[len(target) + 1 :]
    raise AssertionError(f"{path} is not under a bind mount of the repository")


def test_compose_cluster_commands_and_wiring() -> None:
    services = compose_services()
    cluster, trainer, prometheus = services["cluster"], services["trainer"], services["prometheus"]

    args = parse_command([expand_compose(str(a)) for a in cluster["command"]])
    assert (args.command, args.cluster_command) == ("cluster", "up")
    assert args.nodes == 4 and args.instance_type in INSTANCE_TYPES and args.exporter_port_base > 0
    parse_command(cluster["healthcheck"]["test"][1:])

    # the trainer attaches to node 0, in the cluster's PID and network namespaces
    runtime = cluster["environment"]["XDG_RUNTIME_DIR"]
    assert mounts(cluster)[runtime] == mounts(trainer)[runtime]
    assert trainer["environment"]["NEURON_EMULATOR_ADDR"] == Layout(runtime).node_socket(0)
    assert trainer["pid"] == trainer["network_mode"] == "service:cluster"
    assert parse_command(trainer["command"]).command == "run"

    # Prometheus reads the target file where the cluster writes it, through the same volume
    file_sd = PurePosixPath(args.file_sd)
    volume = mounts(cluster)[str(file_sd.parent)]
    assert mounts(prometheus)[str(file_sd.parent)] == volume
    assert prometheus["network_mode"] == "service:cluster"
    config_path = next(a.split("=", 1)[1] for a in prometheus["command"] if a.startswith("--config.file="))
    config = yaml.safe_load(in_repo(prometheus, config_path).read_text())
    (job,) = config["scrape_configs"]
    assert job["file_sd_configs"][0]["files"] == [str(file_sd)]
    for rules in config["rule_files"]:
        assert in_repo(prometheus, rules).is_file()


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package 'prometheus') not installed")
def test_compose_prometheus_config_passes_promtool(tmp_path: Path) -> None:
    prometheus = compose_services()["prometheus"]
    config_path = next(a.split("=", 1)[1] for a in prometheus["command"] if a.startswith("--config.file="))
    text = in_repo(prometheus, config_path).read_text()
    config = yaml.safe_load(text)
    for rules in config["rule_files"]:
        text = text.replace(rules, str(in_repo(prometheus, rules)))
    (tmp_path / "file_sd.json").write_text('[{"targets": ["127.0.0.1:9100"], "labels": {"node": "0"}}]\n')
    text = text.replace(config["scrape_configs"][0]["file_sd_configs"][0]["files"][0], str(tmp_path / "file_sd.json"))
    (tmp_path / "prometheus.yml").write_text(text)
    check = subprocess.run([PROMTOOL, "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True)
    assert check.returncode == 0, check.stdout + check.stderr
