"""The install as docs/install.md writes it, with the project's kubectl (v1.36.3, built by
tools/build.sh) against the local control plane: `kubectl apply -k manifests/` and
`-k manifests/agent/` pass a server-side dry run (every object admitted and validated by the
API server, nothing stored), and the kustomizations render what the docs say, an image
overlay included. tests/unit/test_manifests.py checks the same files without a cluster."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpusched.devcluster import LocalCluster
from gpusched.devcluster.binaries import find_binaries

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
MANIFESTS = ROOT / "manifests"
REGISTRY = "registry.example.com"  # stands for docs/install.md's REGISTRY


def kubectl(*args: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return subprocess.run(
        [str(find_binaries().kubectl), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def rendered(directory: Path) -> list[dict[str, Any]]:
    result = kubectl("kustomize", str(directory))
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def test_kubectl_kustomize_renders_the_install_with_the_metrics_service() -> None:
    objects = rendered(MANIFESTS)
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ("Service", "gpusched-metrics") in kinds
    assert ("Deployment", "gpusched") in kinds
    assert ("CustomResourceDefinition", "podgroups.scheduling.x-k8s.io") in kinds
    assert not any(o["kind"] == "GpuSchedulerConfiguration" for o in objects)
    assert not any(o["kind"] in ("Job", "DaemonSet", "PodGroup") for o in objects)


def install_md_overlay() -> dict[str, Any]:
    """The overlay docs/install.md tells users to write (step 3), as written there."""
    text = (ROOT / "docs" / "install.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)
    (overlay,) = [d for d in map(yaml.safe_load, blocks) if d.get("kind") == "Kustomization"]
    assert isinstance(overlay, dict)
    return overlay


def test_an_image_overlay_as_install_md_writes_it(tmp_path: Path) -> None:
    """docs/install.md's overlay, next to a checkout named gpusched: the image pushed to
    your registry replaces gpusched:dev in the Deployment (and in the agent's DaemonSet,
    the line the page leaves commented out)."""
    overlay = install_md_overlay()
    assert overlay["resources"] == ["../gpusched/manifests"]
    overlay["resources"].append("../gpusched/manifests/agent")
    ((image,),) = [overlay["images"]]
    assert image["newName"].startswith("REGISTRY/")
    image["newName"] = image["newName"].replace("REGISTRY", REGISTRY)
    (tmp_path / "gpusched").symlink_to(ROOT)
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "kustomization.yaml").write_text(yaml.safe_dump(overlay))

    objects = rendered(tmp_path / "deploy")
    images = {
        o["kind"]: c["image"]
        for o in objects
        if o["kind"] in ("Deployment", "DaemonSet")
        for c in o["spec"]["template"]["spec"]["containers"]
    }
    want = f"{REGISTRY}/platform/gpusched:{image['newTag']}"
    assert images == {"Deployment": want, "DaemonSet": want}


def test_apply_k_manifests_passes_a_server_side_dry_run(cluster: LocalCluster) -> None:
    for directory, expected in (
        (
            MANIFESTS,
            {
                "customresourcedefinition.apiextensions.k8s.io/podgroups.scheduling.x-k8s.io",
                "serviceaccount/gpusched",
                "clusterrole.rbac.authorization.k8s.io/gpusched",
                "validatingadmissionpolicy.admissionregistration.k8s.io/gpusched-binding-assignment",
                "configmap/gpusched-config",
                "deployment.apps/gpusched",
                "service/gpusched-metrics",
            },
        ),
        (MANIFESTS / "agent", {"daemonset.apps/gpusched-agent"}),
    ):
        result = kubectl(
            "apply", "-k", str(directory), "--dry-run=server", "-o", "name",
            kubeconfig=cluster.kubeconfig,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert expected <= set(result.stdout.split()), result.stdout
    # A dry run stores nothing.
    left = kubectl(
        "-n", "kube-system", "get", "deployment/gpusched", "service/gpusched-metrics",
        "daemonset/gpusched-agent", "--ignore-not-found", "-o", "name",
        kubeconfig=cluster.kubeconfig,
    )  # fmt: skip
    assert left.returncode == 0, left.stderr
    assert left.stdout.strip() == ""
