"""manifests/agent/: the three files agree on the agent's identity, and the DaemonSet gives
the agent what docs/telemetry-agent.md says it needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpusched.agent.main import NODE_NAME_ENV
from gpusched.model import keys

MANIFESTS = Path(__file__).parents[3] / "manifests" / "agent"
AGENT = "system:serviceaccount:kube-system:gpusched-agent"


def docs(name: str) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all((MANIFESTS / name).read_text())}


def test_rbac_is_nodes_get_and_patch_only() -> None:
    rbac = docs("rbac.yaml")
    account = rbac["ServiceAccount"]["metadata"]
    assert f"system:serviceaccount:{account['namespace']}:{account['name']}" == AGENT
    assert rbac["ClusterRole"]["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}
    ]
    subject = rbac["ClusterRoleBinding"]["subjects"][0]
    assert (subject["name"], subject["namespace"]) == (account["name"], account["namespace"])


def test_policy_names_the_agent_and_the_annotation() -> None:
    adm = docs("admission.yaml")
    spec = adm["ValidatingAdmissionPolicy"]["spec"]
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert variables["agent"] == f"'{AGENT}'"
    assert variables["key"] == f"'{keys.GPU_INVENTORY}'"
    assert f"'{AGENT}'" in spec["matchConditions"][0]["expression"]
    assert spec["failurePolicy"] == "Fail"
    binding = adm["ValidatingAdmissionPolicyBinding"]["spec"]
    assert binding == {
        "policyName": adm["ValidatingAdmissionPolicy"]["metadata"]["name"],
        "validationActions": ["Deny"],
    }


def test_daemonset_runs_the_agent_as_its_account_with_its_node_name() -> None:
    ds = docs("daemonset.yaml")["DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "gpusched-agent"
    (container,) = pod["containers"]
    assert container["args"][0] == "agent"
    env = {e["name"]: e for e in container["env"]}
    assert env[NODE_NAME_ENV]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert "nvidia.com/gpu" not in str(container.get("resources", {}))  # reads, allocates none
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
