"""The daemon runs with exactly the rights manifests/rbac/gpusched.yaml grants.

The other daemon tests run as cluster admin; this one applies the shipped ServiceAccount,
ClusterRole and binding, takes a token for that account from the TokenRequest API, and
checks that every write the daemon makes (the Binding with its gpu-ids, Events, the PodScheduled
condition, the leader Lease kube-system/gpusched) is allowed, so a user who applies the
manifests gets a working scheduler.
"""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest
import yaml

from gpusched.devcluster import LocalCluster
from gpusched.devcluster.cluster import write_kubeconfig
from gpusched.devcluster.demo import demo_pod, wait_settled
from gpusched.devcluster.testkit import wait_until_allowed
from gpusched.kube import ApiError, Kube, pod_path
from gpusched.model import keys
from tests.integration.daemon_support import (
    daemon_settings,
    events_for,
    node_pool,
    placement,
    pool_node,
    pool_specs,
    running_daemon,
)

pytestmark = pytest.mark.integration

RBAC = Path(__file__).parents[2] / "manifests/rbac/gpusched.yaml"
COLLECTIONS = {
    "ServiceAccount": "/api/v1/namespaces/{namespace}/serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
}


async def _apply_rbac(kube: Kube) -> tuple[str, str]:
    account = ("", "")
    for doc in yaml.safe_load_all(RBAC.read_text()):
        path = COLLECTIONS[doc["kind"]].format(namespace=doc["metadata"].get("namespace", ""))
        try:
            await kube.post(path, doc)
        except ApiError as exc:
            if exc.status != 409:  # the session cluster may have it from an earlier run
                raise
        if doc["kind"] == "ServiceAccount":
            account = (doc["metadata"]["namespace"], doc["metadata"]["name"])
    return account


async def test_daemon_works_with_the_shipped_rbac(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    ns, name = await _apply_rbac(kube)
    account = f"system:serviceaccount:{ns}:{name}"
    await wait_until_allowed(kube, account, "watch", "pods")
    await wait_until_allowed(
        kube, account, "create", "pods", subresource="binding", namespace=namespace
    )
    await wait_until_allowed(
        kube, account, "patch", "pods", subresource="status", namespace=namespace
    )
    for verb in ("create", "update"):
        await wait_until_allowed(
            kube,
            account,
            verb,
            "leases",
            group="coordination.k8s.io",
            namespace="kube-system",
            name="" if verb == "create" else "gpusched",
        )
    # A refused configuration reload reads the ConfigMap's uid for its Event.
    await wait_until_allowed(
        kube, account, "get", "configmaps", namespace="kube-system", name="gpusched-config"
    )
    request = await kube.post(
        f"/api/v1/namespaces/{ns}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    kubeconfig = tmp_path / "gpusched.kubeconfig"
    write_kubeconfig(
        kubeconfig, cluster.server, cluster.ca_file, request["status"]["token"], "gpusched"
    )
    pool = "rbac"
    nodes = [pool_node(s, pool) for s in pool_specs(pool, 3)]
    pods = [
        demo_pod("fits", gpus=1, **placement(pool)),
        demo_pod("shared", annotations={keys.GPU_MILLI: "300"}, **placement(pool)),
        demo_pod("too-big", gpus=16, **placement(pool)),
    ]
    stream = io.StringIO()
    # The shipped Lease name: the Role grants get/update on that one only.
    async with (
        node_pool(kube, nodes),
        running_daemon(kubeconfig, stream, daemon_settings("gpusched")),
    ):
        for pod in pods:
            await kube.post(pod_path(namespace), pod)
        final = await wait_settled(kube, namespace, [p["metadata"]["name"] for p in pods])

    assert final["fits"]["spec"].get("nodeName"), final["fits"].get("status")
    assert final["fits"]["metadata"]["annotations"][keys.GPU_IDS]
    assert final["shared"]["metadata"]["annotations"][keys.GPU_MILLI_ASSIGNED] == "300"
    assert not final["too-big"]["spec"].get("nodeName")
    assert await events_for(kube, namespace, "fits", "Scheduled")
    assert await events_for(kube, namespace, "too-big", "FailedScheduling")
    cond = next(c for c in final["too-big"]["status"]["conditions"] if c["type"] == "PodScheduled")
    assert cond["reason"] == "Unschedulable"
    # No write was refused: a refused Event or status patch is logged as a failed background
    # write, a refused annotation or Binding ends the attempt with the API's Forbidden.
    lines = [orjson.loads(line) for line in stream.getvalue().splitlines()]
    refused = [
        r
        for r in lines
        if r.get("event") == "background write failed"
        or "forbidden" in str(r.get("message", "")).lower()
        or "forbidden" in str(r.get("error", "")).lower()
    ]
    assert refused == [], refused
    # The assignment came with the Binding: the scheduler's account cannot patch pods, so
    # it cannot rewrite a running pod's cards either.
    async with await Kube.connect(kubeconfig) as as_scheduler:
        with pytest.raises(ApiError) as denied:
            await as_scheduler.request(
                "PATCH",
                pod_path(namespace, "fits"),
                body={"metadata": {"annotations": {keys.GPU_IDS: "7"}}},
                content_type="application/merge-patch+json",
            )
    assert denied.value.status == 403
