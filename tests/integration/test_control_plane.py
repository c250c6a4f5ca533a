"""Acceptance of the local control plane (issue 2): KWOK GPU nodes, binding through the API,
KWOK playing the kubelet, the kube-scheduler baseline, RBAC, the project's CRDs."""

from __future__ import annotations

import json
import time

import pytest

from gpusched.devcluster import (
    BASELINE_SCHEDULER,
    KWOK_ANNOTATION,
    NO_RIGHTS,
    LocalCluster,
    NodeSpec,
    generated_fleet,
    load_nodes,
    node_object,
    wait_nodes_ready,
)
from gpusched.devcluster.testkit import (
    PODGROUP_API,
    make_pod,
    make_pod_group,
    wait_pod_running,
    wait_pod_scheduled,
    wait_until_allowed,
)
from gpusched.kube import ApiError, Kube, bind_pod, has_condition, pod_path, wait_for_deletion
from gpusched.model import keys

pytestmark = pytest.mark.integration


async def test_100_kwok_gpu_nodes_become_ready(kube: Kube) -> None:
    specs = generated_fleet(100)
    t0 = time.monotonic()
    await load_nodes(kube, specs)
    await wait_nodes_ready(kube, [s.name for s in specs])
    elapsed = time.monotonic() - t0

    listing = await kube.get("/api/v1/nodes", query=[("labelSelector", "gpusched.io/devcluster")])
    nodes = {n["metadata"]["name"]: n for n in listing["items"]}
    assert {s.name for s in specs} <= set(nodes)
    first = nodes[specs[0].name]
    assert first["metadata"]["annotations"][KWOK_ANNOTATION] == "fake"
    assert first["status"]["allocatable"][keys.GPU_RESOURCE] == "8"
    assert first["metadata"]["labels"][keys.GFD_PRODUCT] == "NVIDIA-A100-SXM4-80GB"
    assert first["metadata"]["labels"][keys.RACK_LABEL] == "rack-000"
    inventory = json.loads(first["metadata"]["annotations"][keys.GPU_INVENTORY])
    assert [card["index"] for card in inventory] == list(range(8))
    # TaintNodesByCondition is off, so no not-ready taint that nothing would ever lift.
    assert not first["spec"].get("taints")
    print(f"100 nodes created and Ready in {elapsed:.2f}s")


async def test_binding_subresource_binds_and_kwok_runs_the_pod(
    kube: Kube, namespace: str, gpu_fleet: list[NodeSpec]
) -> None:
    node = gpu_fleet[1].name
    pod = await make_pod(kube, namespace, "bound-by-hand", gpus=1)

    await bind_pod(kube, namespace, "bound-by-hand", node, uid=pod["metadata"]["uid"])
    running = await wait_pod_running(kube, namespace, "bound-by-hand")

    assert running["spec"]["nodeName"] == node
    assert running["status"]["podIP"]  # KWOK's pod-ready stage filled in the status
    assert has_condition(running, "Ready")
    # The API server's answers a scheduler must handle: a second binding conflicts, a
    # missing pod is not found.
    with pytest.raises(ApiError) as conflict:
        await bind_pod(kube, namespace, "bound-by-hand", gpu_fleet[2].name)
    assert conflict.value.status == 409
    with pytest.raises(ApiError) as missing:
        await bind_pod(kube, namespace, "no-such-pod", node)
    assert missing.value.status == 404


async def test_kwok_finishes_graceful_deletion_of_a_bound_pod(
    kube: Kube, namespace: str, gpu_fleet: list[NodeSpec]
) -> None:
    await make_pod(kube, namespace, "to-delete", gpus=1)
    await bind_pod(kube, namespace, "to-delete", gpu_fleet[3].name)
    await wait_pod_running(kube, namespace, "to-delete")

    # A graceful delete only marks a bound pod; the kubelet (here KWOK) removes it.
    await kube.delete(pod_path(namespace, "to-delete"))
    await wait_for_deletion(kube, pod_path(namespace), "to-delete", timeout=30)


async def test_kube_scheduler_places_a_default_scheduler_pod_on_a_kwok_node(
    kube: Kube, namespace: str, gpu_fleet: list[NodeSpec]
) -> None:
    await make_pod(kube, namespace, "baseline", gpus=8, scheduler_name=None)

    pod = await wait_pod_scheduled(kube, namespace, "baseline")
    await wait_pod_running(kube, namespace, "baseline")

    assert pod["spec"]["schedulerName"] == BASELINE_SCHEDULER
    node = await kube.get(f"/api/v1/nodes/{pod['spec']['nodeName']}")
    assert node["metadata"]["annotations"][KWOK_ANNOTATION] == "fake"
    assert int(node["status"]["allocatable"][keys.GPU_RESOURCE]) >= 8


async def test_rbac_denies_a_binding_to_a_token_without_rights(
    cluster: LocalCluster, kube: Kube, namespace: str, gpu_fleet: list[NodeSpec]
) -> None:
    await make_pod(kube, namespace, "rbac-target", gpus=1)
    node = gpu_fleet[4].name

    async with Kube.with_token(
        cluster.server, cluster.token(NO_RIGHTS.user), cluster.ca_file
    ) as nobody:
        with pytest.raises(ApiError) as denied:
            await bind_pod(nobody, namespace, "rbac-target", node)
        assert denied.value.status == 403

        # The same token succeeds once RBAC grants pods/binding: the 403 came from RBAC.
        rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
        await kube.post(
            f"{rbac}/roles",
            {
                "metadata": {"name": "binder"},
                "rules": [{"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]}],
            },
        )
        await kube.post(
            f"{rbac}/rolebindings",
            {
                "metadata": {"name": "binder"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "binder",
                },
                "subjects": [
                    {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "User",
                        "name": NO_RIGHTS.user,
                    }
                ],
            },
        )
        await wait_until_allowed(
            kube, NO_RIGHTS.user, "create", "pods", subresource="binding", namespace=namespace
        )
        await bind_pod(nobody, namespace, "rbac-target", node)
    await wait_pod_running(kube, namespace, "rbac-target")


async def test_service_account_token_without_rights_gets_403(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    # Tokens issued by the TokenRequest API (signed with the generated service-account key)
    # authenticate, and RBAC then denies what the account was not granted.
    await kube.post(f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "sa"}})
    request = await kube.post(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/sa/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    await make_pod(kube, namespace, "sa-target")
    async with Kube.with_token(
        cluster.server, request["status"]["token"], cluster.ca_file
    ) as account:
        with pytest.raises(ApiError) as denied:
            await bind_pod(account, namespace, "sa-target", "gpu-node-0000")
    assert denied.value.status == 403
    assert f"system:serviceaccount:{namespace}:sa" in denied.value.message


async def test_pod_group_crd_is_served_with_its_schema(kube: Kube, namespace: str) -> None:
    created = await make_pod_group(kube, namespace, "gang", 4)
    assert created["spec"]["minMember"] == 4

    with pytest.raises(ApiError) as invalid:
        await make_pod_group(kube, namespace, "empty-gang", 0)
    assert invalid.value.status == 422  # minimum: 1, as in scheduler-plugins' schema

    quota = await kube.post(
        f"{PODGROUP_API}/namespaces/{namespace}/elasticquotas",
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "ElasticQuota",
            "metadata": {"name": "tenant"},
            "spec": {"min": {keys.GPU_RESOURCE: 8}, "max": {keys.GPU_RESOURCE: "16"}},
        },
    )
    assert quota["spec"]["max"][keys.GPU_RESOURCE] == "16"


async def test_kwok_leaves_nodes_without_its_annotation_alone(kube: Kube) -> None:
    # Two nodes created together; KWOK must initialise only the annotated one. Unschedulable
    # and GPU-less, so no other test's pod can land on the node nobody runs.
    plain, fake = (
        NodeSpec(name, 0, "", 1000, 1024, "rack-x", "spine-x") for name in ("plain", "fake")
    )
    plain_obj = node_object(plain, kwok=False)
    plain_obj["spec"]["unschedulable"] = True
    try:
        await kube.post("/api/v1/nodes", plain_obj)
        await kube.post("/api/v1/nodes", node_object(fake))
        await wait_nodes_ready(kube, ["fake"], timeout=30)

        node = await kube.get("/api/v1/nodes/plain")
        assert not has_condition(node, "Ready")
    finally:
        for name in ("plain", "fake"):
            await kube.delete(f"/api/v1/nodes/{name}")
