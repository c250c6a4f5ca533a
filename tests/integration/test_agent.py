"""`gpusched agent` on the real control plane, with the shipped least-privilege manifests
(manifests/agent/rbac.yaml and admission.yaml, applied verbatim).

The agent runs as a child process (`gpusched agent --once`) with a fake NVML (the DGX A100
layout) and a kubeconfig holding a token of its ServiceAccount bound to a pod on KWOK node
X, as the kubelet's projected token is: the API server puts that pod's node into the
caller's userInfo.extra['authentication.kubernetes.io/node-name'] (kube-apiserver 1.36,
ServiceAccountTokenPodNodeInfo on by default; the first test checks it with a
SelfSubjectReview). Node X gets the inventory the scheduler's parser reads back; the same
token cannot touch node Y, nor anything of X but that annotation.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest
import yaml

from gpusched.agent.fakes import dgx_a100
from gpusched.agent.fakes._fake import FakeNvml
from gpusched.agent.inventory import annotation_value, read_inventory
from gpusched.agent.nvml import ENV
from gpusched.devcluster import LocalCluster
from gpusched.devcluster.cluster import write_kubeconfig
from gpusched.devcluster.nodes import NodeSpec, node_object
from gpusched.devcluster.testkit import pod_manifest, wait_until_allowed
from gpusched.kube import JSON, ApiError, Kube, create_nodes, pod_path
from gpusched.model import keys
from gpusched.model.node import node_from_k8s
from tests.integration.daemon_support import apply_docs, collection, denied

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests/agent"
AGENT = "system:serviceaccount:kube-system:gpusched-agent"
POLICY = "gpusched-agent-node-inventory"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
FAKE = "gpusched.agent.fakes.dgx_a100"


def _docs(name: str) -> list[JSON]:
    return list(yaml.safe_load_all((MANIFESTS / name).read_text()))


def _node(name: str) -> JSON:
    """A KWOK node with eight cards' allocatable and no inventory yet."""
    spec = NodeSpec(name, 8, "A100M80", 96_000, 1_048_576, "rack-agent", "spine-agent")
    obj = node_object(spec)
    del obj["metadata"]["annotations"][keys.GPU_INVENTORY]
    return obj


def _expected() -> str:
    """What the agent must publish: the DGX A100 layout read by a fresh fake."""
    return annotation_value(read_inventory(SimpleNamespace(**FakeNvml(dgx_a100.GPUS).namespace())))


@dataclass
class AgentIdentity:
    node: str  # X: where the agent's pod runs
    other: str  # Y: another node
    token: str  # bound to the pod on X
    kubeconfig: Path


async def _bound_token(kube: Kube, pod: JSON) -> str:
    request = await kube.post(
        "/api/v1/namespaces/kube-system/serviceaccounts/gpusched-agent/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": 3600,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod["metadata"]["name"],
                    "uid": pod["metadata"]["uid"],
                },
            },
        },
    )
    return str(request["status"]["token"])


async def _wait_policy(agent: Kube, node: str, timeout: float = 30.0) -> None:  # noqa: ASYNC109
    """Until the policy denies: the API server compiles a new policy a moment after the POST
    and nothing reports it, so ask with a dry-run patch (no effect either way)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pause = 0.02
    probe = {"metadata": {"labels": {"gpusched.io/agent-probe": "x"}}}
    while True:
        try:
            await agent.request(
                "PATCH",
                f"/api/v1/nodes/{node}",
                body=probe,
                query=[("dryRun", "All")],
                content_type="application/merge-patch+json",
            )
        except ApiError as exc:
            if exc.status == 403 and f"ValidatingAdmissionPolicy '{POLICY}'" in exc.message:
                return
            raise
        if loop.time() >= deadline:
            raise TimeoutError(f"{POLICY} not enforced after {timeout}s")
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.5)


@pytest.fixture
async def identity(
    cluster: LocalCluster, kube: Kube, tmp_path: Path
) -> AsyncIterator[AgentIdentity]:
    suffix = secrets.token_hex(3)
    x, y = f"agent-x-{suffix}", f"agent-y-{suffix}"
    docs = _docs("rbac.yaml") + _docs("admission.yaml")
    await apply_docs(kube, docs)
    await create_nodes(kube, [_node(x), _node(y)])
    pod = pod_manifest(f"gpusched-agent-{suffix}", scheduler_name=None)
    pod["spec"].update({"nodeName": x, "serviceAccountName": "gpusched-agent"})
    created = await kube.post(pod_path("kube-system"), pod)
    name = created["metadata"]["name"]
    try:
        for verb in ("get", "patch"):
            await wait_until_allowed(kube, AGENT, verb, "nodes")
        token = await _bound_token(kube, created)
        path = tmp_path / "agent.kubeconfig"
        write_kubeconfig(path, cluster.server, cluster.ca_file, token, "gpusched-agent")
        async with Kube.with_token(cluster.server, token, cluster.ca_file) as agent:
            await _wait_policy(agent, y)
        yield AgentIdentity(x, y, token, path)
    finally:
        await kube.delete(pod_path("kube-system", name), query=[("gracePeriodSeconds", 0)])
        for node in (x, y):
            await kube.delete(f"/api/v1/nodes/{node}")
        for doc in reversed(docs):  # bindings before their policies
            if doc["kind"] in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
                await kube.delete(f"{collection(doc)}/{doc['metadata']['name']}")


async def _run_agent(kubeconfig: Path, node: str) -> tuple[int, list[JSON], str]:
    """`gpusched agent --once` as a child process: (exit code, JSON log lines, stderr)."""
    env = {
        **os.environ,
        ENV: FAKE,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    env.pop("NODE_NAME", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpusched.cli",
        "agent",
        "--once",
        "--kubeconfig",
        str(kubeconfig),
        "--node-name",
        node,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    lines = [orjson.loads(line) for line in out.splitlines() if line.strip()]
    assert proc.returncode is not None
    return proc.returncode, lines, err.decode()


async def _inventory(kube: Kube, node: str) -> str | None:
    obj = await kube.get(f"/api/v1/nodes/{node}")
    value = (obj["metadata"].get("annotations") or {}).get(keys.GPU_INVENTORY)
    return None if value is None else str(value)


async def test_bound_token_carries_the_pods_node(kube: Kube, identity: AgentIdentity) -> None:
    """The premise of the policy, on this API server: a pod-bound token names the node."""
    async with Kube.with_token(kube.host, identity.token, _ca(kube)) as agent:
        review = await agent.post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    user = review["status"]["userInfo"]
    assert user["username"] == AGENT
    assert user["extra"][NODE_NAME_EXTRA] == [identity.node]


def _ca(kube: Kube) -> str:
    return str(kube.api_client.configuration.ssl_ca_cert)


async def test_agent_publishes_its_nodes_inventory(kube: Kube, identity: AgentIdentity) -> None:
    rc, lines, err = await _run_agent(identity.kubeconfig, identity.node)
    assert rc == 0, (lines, err)
    assert [r["event"] for r in lines][-1] == "inventory published"
    value = await _inventory(kube, identity.node)
    assert value == _expected()
    # The acceptance: the scheduler's parser reads back exactly the cards the agent saw.
    model = node_from_k8s(await kube.get(f"/api/v1/nodes/{identity.node}"))
    assert model.gpu_source == "inventory" and model.warnings == ()
    read_back = [
        {
            "index": c.index,
            "uuid": c.uuid,
            "model": c.model,
            "memoryMiB": c.memory_mib,
            "nvlinkIsland": c.nvlink_island,
            "numa": c.numa,
            "healthy": c.healthy,
            "fabricClique": c.fabric_clique,
            "powerLimitW": c.power_limit_w,
        }
        for c in model.cards
    ]
    assert read_back == orjson.loads(_expected())
    # Run again: the node already carries it, nothing is written.
    rc, lines, err = await _run_agent(identity.kubeconfig, identity.node)
    assert rc == 0, (lines, err)
    events = [r["event"] for r in lines]
    assert "inventory current" in events and "inventory published" not in events
    assert await _inventory(kube, identity.node) == value


async def test_the_token_cannot_touch_another_node_nor_more_than_the_annotation(
    kube: Kube, identity: AgentIdentity
) -> None:
    x, y = identity.node, identity.other
    async with Kube.with_token(kube.host, identity.token, _ca(kube)) as agent:
        # Its own node's annotation: allowed (what the agent does).
        await agent.merge_patch(
            f"/api/v1/nodes/{x}", {"metadata": {"annotations": {keys.GPU_INVENTORY: "[]"}}}
        )
        error = await denied(
            agent.merge_patch(
                f"/api/v1/nodes/{y}", {"metadata": {"annotations": {keys.GPU_INVENTORY: "[]"}}}
            ),
            POLICY,
        )
        assert f"this token is bound to node {x}, not to node {y}" in error.message
        for patch in (
            {"metadata": {"labels": {keys.RACK_LABEL: "elsewhere"}}},
            {"metadata": {"annotations": {"other.example/key": "v"}}},
            {"spec": {"unschedulable": True}},
            {
                "metadata": {
                    "labels": {keys.RACK_LABEL: "elsewhere"},
                    "annotations": {keys.GPU_INVENTORY: "[]"},
                }
            },
        ):
            error = await denied(agent.merge_patch(f"/api/v1/nodes/{x}", patch), POLICY)
            assert (
                f"may change only the annotation {keys.GPU_INVENTORY} of node {x}" in error.message
            )
    node = await kube.get(f"/api/v1/nodes/{x}")
    assert node["metadata"]["labels"][keys.RACK_LABEL] == "rack-agent"
    assert "other.example/key" not in node["metadata"]["annotations"]
    assert not node["spec"].get("unschedulable", False)
    assert await _inventory(kube, y) is None


async def test_agent_for_another_node_is_refused(kube: Kube, identity: AgentIdentity) -> None:
    rc, lines, err = await _run_agent(identity.kubeconfig, identity.other)
    assert rc == 1, (lines, err)
    failure = next(r for r in lines if r["event"] == "api request failed")
    assert "HTTP 403" in failure["error"] and POLICY in failure["error"]
    assert await _inventory(kube, identity.other) is None


async def test_a_token_bound_to_no_pod_is_refused(kube: Kube, identity: AgentIdentity) -> None:
    request = await kube.post(
        "/api/v1/namespaces/kube-system/serviceaccounts/gpusched-agent/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    async with Kube.with_token(kube.host, str(request["status"]["token"]), _ca(kube)) as agent:
        error = await denied(
            agent.merge_patch(
                f"/api/v1/nodes/{identity.node}",
                {"metadata": {"annotations": {keys.GPU_INVENTORY: "[]"}}},
            ),
            POLICY,
        )
    assert "this token is bound to no node" in error.message
