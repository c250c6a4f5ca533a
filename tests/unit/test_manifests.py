"""manifests/ as kustomizations: what `kubectl apply -k manifests/` (and manifests/agent/)
installs, read the way kustomize reads it (each kustomization's `resources`, in order).
tests/integration/test_install.py renders and dry-runs them with the project's kubectl."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpusched.cli import build_parser

MANIFESTS = Path(__file__).parents[2] / "manifests"
JSON = dict[str, Any]


def kustomization(directory: Path) -> list[JSON]:
    """The objects a kustomization lists, in order (files only: ours nest no directories)."""
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert spec["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert spec["kind"] == "Kustomization"
    objects: list[JSON] = []
    for entry in spec["resources"]:
        path = directory / entry
        assert path.is_file(), f"{directory.name}/kustomization.yaml lists missing {entry}"
        objects += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return objects


def listed_files(directory: Path) -> set[Path]:
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    return {(directory / entry).resolve() for entry in spec["resources"]}


def by_kind(objects: list[JSON], kind: str) -> list[JSON]:
    return [o for o in objects if o["kind"] == kind]


def test_every_listed_document_is_a_kubernetes_object() -> None:
    for directory in (MANIFESTS, MANIFESTS / "agent"):
        for obj in kustomization(directory):
            assert {"apiVersion", "kind", "metadata"} <= obj.keys(), obj
            assert obj["metadata"].get("name"), obj
            # The configuration file's kind, which no API server serves.
            assert obj["kind"] != "GpuSchedulerConfiguration"


def test_the_install_lists_every_manifest_but_the_examples_and_the_agent() -> None:
    """A manifest added under manifests/ without a line in a kustomization would silently
    not be installed."""
    on_disk = {
        p.resolve()
        for p in MANIFESTS.rglob("*.yaml")
        if p.name != "kustomization.yaml" and "examples" not in p.relative_to(MANIFESTS).parts
    }
    top, agent = listed_files(MANIFESTS), listed_files(MANIFESTS / "agent")
    assert top | agent == on_disk
    assert not top & agent
    assert all(MANIFESTS / "agent" in p.parents for p in agent)


def test_the_example_configuration_is_outside_the_apply_path() -> None:
    """`kubectl apply -R -f manifests/` tripped on it: it is gpusched's file, not an object."""
    assert not list(MANIFESTS.rglob("scheduler-config.yaml"))
    example = Path(__file__).parents[2] / "config" / "scheduler-config.yaml"
    assert yaml.safe_load(example.read_text())["kind"] == "GpuSchedulerConfiguration"


def test_the_install_has_what_the_daemon_needs() -> None:
    objects = kustomization(MANIFESTS)
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert {
        ("CustomResourceDefinition", "podgroups.scheduling.x-k8s.io"),
        ("CustomResourceDefinition", "elasticquotas.scheduling.x-k8s.io"),
        ("ServiceAccount", "gpusched"),
        ("ClusterRole", "gpusched"),
        ("ClusterRoleBinding", "gpusched"),
        ("Role", "gpusched-leader-election"),
        ("ValidatingAdmissionPolicy", "gpusched-assignment-immutable"),
        ("ValidatingAdmissionPolicy", "gpusched-binding-assignment"),
        ("ConfigMap", "gpusched-config"),
        ("Deployment", "gpusched"),
        ("Service", "gpusched-metrics"),
    } <= names
    # CRDs first, as kustomize keeps this order and an apply creates them before use.
    kinds = [o["kind"] for o in objects]
    assert kinds.index("CustomResourceDefinition") == 0
    assert max(i for i, k in enumerate(kinds) if k == "CustomResourceDefinition") < kinds.index(
        "Deployment"
    )


def test_the_metrics_service_reaches_the_daemons_metrics_port() -> None:
    objects = kustomization(MANIFESTS)
    (deployment,) = by_kind(objects, "Deployment")
    (service,) = by_kind(objects, "Service")
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    args = container["args"]
    flag_port = int(args[args.index("--metrics-port") + 1])
    default_port = build_parser().parse_args(["run"]).metrics_port
    assert ports["metrics"] == flag_port == default_port == 10259

    assert service["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    selector = service["spec"]["selector"]
    assert selector.items() <= pod["metadata"]["labels"].items()
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] in ("metrics", ports["metrics"])
    assert port["port"] == ports["metrics"]


def test_the_agent_kustomization() -> None:
    objects = kustomization(MANIFESTS / "agent")
    assert {o["kind"] for o in objects} >= {
        "ServiceAccount",
        "ClusterRole",
        "ValidatingAdmissionPolicy",
        "DaemonSet",
    }
    (daemonset,) = by_kind(objects, "DaemonSet")
    assert daemonset["spec"]["template"]["spec"]["containers"][0]["args"][0] == "agent"
