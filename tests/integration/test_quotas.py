"""Tenants and their ElasticQuotas on the real control plane (KWOK nodes), with the daemon
running as the shipped ServiceAccount (manifests/rbac/gpusched.yaml).

Two tenants: tenant A is one namespace; tenant B is two namespaces labelled
`gpusched.io/tenant`, its ElasticQuota in one of them. Each has a min and a max of
nvidia.com/gpu. Checked at every step: pods placed or left Pending with the
FailedScheduling message naming the ElasticQuota, and `status.used` (written by the
leader's embedded operator), waited for on a watch of the object.

Reclaim: a tenant under its min takes back by preemption what another borrowed while it
was idle, and only that much (`test_reclaim_when_the_lender_returns`).
"""

from __future__ import annotations

import io
import re
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from gpusched.devcluster import LocalCluster, demo
from gpusched.devcluster.cluster import write_kubeconfig
from gpusched.devcluster.testkit import pod_manifest, wait_until_allowed
from gpusched.kube import JSON, ApiError, Kube, create_namespace, delete_namespace, pod_path
from gpusched.model import keys
from tests.integration.daemon_support import (
    RBAC,
    apply_docs,
    daemon_settings,
    first_event,
    node_pool,
    placement,
    pool_name,
    pool_node,
    pool_specs,
    running_daemon,
    sa_token,
)
from tests.integration.test_daemon_podgroups import wait_for

pytestmark = pytest.mark.integration

API = "/apis/scheduling.x-k8s.io/v1alpha1"
GPU = keys.GPU_RESOURCE


def elastic_quota(name: str, min_: dict[str, Any], max_: dict[str, Any]) -> JSON:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": name},
        "spec": {"min": min_, "max": max_},
    }


def quotas_of(namespace: str) -> str:
    return f"{API}/namespaces/{namespace}/elasticquotas"


async def shipped_identity(kube: Kube, cluster: LocalCluster, tmp_path: Path, ns: str) -> Path:
    """A kubeconfig of the shipped ServiceAccount, once its quota rights are in force."""
    docs = list(yaml.safe_load_all(RBAC.read_text()))
    await apply_docs(kube, docs)
    account = next(d["metadata"] for d in docs if d["kind"] == "ServiceAccount")
    user = f"system:serviceaccount:{account['namespace']}:{account['name']}"
    group = "scheduling.x-k8s.io"
    await wait_until_allowed(
        kube, user, "patch", "elasticquotas", subresource="status", namespace=ns, group=group
    )
    await wait_until_allowed(kube, user, "watch", "elasticquotas", group=group)
    path = tmp_path / "gpusched.kubeconfig"
    token = await sa_token(kube, account["namespace"], account["name"])
    write_kubeconfig(path, cluster.server, cluster.ca_file, token, "gpusched")
    return path


@asynccontextmanager
async def labelled_namespaces(kube: Kube, tenant: str, count: int) -> AsyncIterator[list[str]]:
    names = [f"{tenant}-{i}" for i in range(count)]
    for name in names:
        await create_namespace(
            kube, name, labels={"gpusched.io/test": "true", keys.TENANT_LABEL: tenant}
        )
    try:
        yield names
    finally:
        for name in names:
            await delete_namespace(kube, name)


@asynccontextmanager
async def created(kube: Kube, *items: tuple[str, JSON]) -> AsyncIterator[None]:
    """ElasticQuotas (namespace, object), deleted afterwards: deleting a test namespace
    finalizes it at once (kube/ops.py), which would leave them in etcd for the next test."""
    for namespace, obj in items:
        await kube.post(quotas_of(namespace), obj)
    try:
        yield
    finally:
        for namespace, obj in items:
            try:
                await kube.delete(f"{quotas_of(namespace)}/{obj['metadata']['name']}")
            except ApiError as exc:
                if exc.status != 404:
                    raise


def used(gpus: str) -> Any:
    """A check on an ElasticQuota: its status.used says `gpus` of nvidia.com/gpu."""
    return lambda o: (o.get("status") or {}).get("used", {}).get(GPU) == gpus


def gpu_pod(where: dict[str, Any], name: str, gpus: int) -> JSON:
    """A pod of `gpus` whole GPUs that goes only to the test's node pool (`where`)."""
    pod = pod_manifest(name, gpus=gpus)
    pod["spec"].update(nodeSelector=where["node_selector"], tolerations=where["tolerations"])
    return pod


def unschedulable(obj: JSON) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(
        c["type"] == "PodScheduled" and (c["status"], c.get("reason")) == ("False", "Unschedulable")
        for c in conditions
    )


def bound(obj: JSON) -> bool:
    return bool(obj["spec"].get("nodeName"))


async def test_two_tenants_max_borrowing_and_status_used(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    kubeconfig = await shipped_identity(kube, cluster, tmp_path, namespace)
    pool = pool_name()
    where = placement(pool)

    tenant_b = f"team-b-{secrets.token_hex(3)}"
    a_quotas = quotas_of(namespace)
    stream = io.StringIO()
    nodes = [pool_node(s, pool) for s in pool_specs(pool, 2)]  # 16 GPUs
    async with (
        labelled_namespaces(kube, tenant_b, 2) as (b1, b2),
        node_pool(kube, nodes),
    ):
        b_quotas = quotas_of(b1)
        async with (
            created(
                kube,
                (namespace, elastic_quota("quota", {GPU: 4}, {GPU: 8})),
                (b1, elastic_quota("quota", {GPU: 4}, {GPU: 6})),
            ),
            running_daemon(kubeconfig, stream, daemon_settings("gpusched")),
        ):
            # Nothing placed yet: status.used says zero GPUs.
            await wait_for(kube, a_quotas, "quota", used("0"))
            await wait_for(kube, b_quotas, "quota", used("0"))

            # Tenant A within its min, then borrowing above it while B is idle (8 > min 4).
            for name in ("a1", "a2"):
                await kube.post(pod_path(namespace), gpu_pod(where, name, 4))
            for name in ("a1", "a2"):
                await wait_for(kube, pod_path(namespace), name, bound)
            await wait_for(kube, a_quotas, "quota", used("8"))

            # At its max: one more GPU is refused, the pod stays Pending, saying why.
            await kube.post(pod_path(namespace), gpu_pod(where, "a3", 1))
            event = await first_event(kube, namespace, "a3", "FailedScheduling")
            assert event["type"] == "Warning"
            assert event["message"].endswith(
                f": ElasticQuota {namespace}/quota: nvidia.com/gpu would be 9 GPUs, max 8 GPUs"
                " (used 8 GPUs, this pod 1 GPU)."
            ), event["message"]
            assert event["message"].startswith("0/"), event["message"]
            # The PodScheduled condition is a write of its own, after the Event.
            a3 = await wait_for(kube, pod_path(namespace), "a3", unschedulable)
            assert not a3["spec"].get("nodeName")

            # Tenant B spans two namespaces: its pods in both count against one quota.
            await kube.post(pod_path(b1), gpu_pod(where, "b1", 3))
            await kube.post(pod_path(b2), gpu_pod(where, "b2", 3))
            await wait_for(kube, pod_path(b1), "b1", bound)
            await wait_for(kube, pod_path(b2), "b2", bound)
            await wait_for(kube, b_quotas, "quota", used("6"))
            await kube.post(pod_path(b2), gpu_pod(where, "b3", 1))
            event = await first_event(kube, b2, "b3", "FailedScheduling")
            assert (
                f"ElasticQuota {b1}/quota: nvidia.com/gpu would be 7 GPUs, max 6 GPUs"
                in (event["message"])
            )
            # A's usage did not move with B's pods.
            await wait_for(kube, a_quotas, "quota", used("8"))

            # One of A's pods leaves: the refused pod is placed (requeued by its own
            # tenant's departure), and status.used follows.
            await kube.delete(pod_path(namespace, "a1"))
            await wait_for(kube, pod_path(namespace), "a3", bound)
            await wait_for(kube, a_quotas, "quota", used("5"))
            # B's refused pod stays refused: another tenant's departure does not lift it.
            b3 = await kube.get(pod_path(b2, "b3"))
            assert not b3["spec"].get("nodeName")

            for ns, names in ((namespace, ("a2", "a3")), (b1, ("b1",)), (b2, ("b2", "b3"))):
                for name in names:
                    await kube.delete(pod_path(ns, name))
            await wait_for(kube, b_quotas, "quota", used("0"))
    _no_refused_writes(stream)


async def test_a_malformed_elastic_quota_gives_a_clear_error(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    kubeconfig = await shipped_identity(kube, cluster, tmp_path, namespace)
    pool = pool_name()
    pod = gpu_pod(placement(pool), "p", 1)
    # The CRD's schema accepts any resource name: a misspelt one reaches the scheduler.
    bad = elastic_quota("quota", {}, {"nvidia.com/gpus": 8})
    stream = io.StringIO()
    nodes = [pool_node(s, pool) for s in pool_specs(pool, 1)]
    async with (
        created(kube, (namespace, bad)),
        node_pool(kube, nodes),
        running_daemon(kubeconfig, stream, daemon_settings("gpusched")),
    ):
        await kube.post(pod_path(namespace), pod)
        event = await first_event(kube, namespace, "p", "FailedScheduling")
        assert (
            f"ElasticQuota {namespace}/quota: spec.max['nvidia.com/gpus'] is not a resource"
            " gpusched counts (one of nvidia.com/gpu, gpusched.io/gpu-memory, cpu, memory,"
            " pods)" in event["message"]
        ), event["message"]
        # The ElasticQuota itself carries the error, for its owner's `kubectl describe`.
        invalid = await first_event(kube, namespace, "quota", "InvalidQuota")
        assert invalid["type"] == "Warning"
        assert invalid["involvedObject"]["kind"] == "ElasticQuota"
        assert "spec.max['nvidia.com/gpus']" in invalid["message"]
        # Fixed: the pod is placed.
        await kube.merge_patch(
            f"{quotas_of(namespace)}/quota",
            {"spec": {"max": {"nvidia.com/gpus": None, GPU: 8}}},
        )
        await wait_for(kube, pod_path(namespace), "p", bound)
        await wait_for(kube, quotas_of(namespace), "quota", used("1"))
        await kube.delete(pod_path(namespace, "p"))
    _no_refused_writes(stream)


def _no_refused_writes(stream: io.StringIO) -> None:
    """Every write the daemon made was allowed by the shipped RBAC."""
    lines = [orjson.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
    refused = [
        r
        for r in lines
        if r.get("event") == "background write failed" or "forbidden" in str(r).lower()
    ]
    assert refused == [], refused


async def test_mins_above_the_cluster_warn_on_each_quota(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    """Guarantees no cluster can hold: a MinimumsExceedCluster Warning on each ElasticQuota
    whose min names the resource (every min of it is scaled down in proportion)."""
    kubeconfig = await shipped_identity(kube, cluster, tmp_path, namespace)
    tenant = f"team-big-{secrets.token_hex(3)}"
    stream = io.StringIO()
    big = elastic_quota("quota", {GPU: 100_000}, {})
    async with (
        labelled_namespaces(kube, tenant, 1) as (other,),
        created(kube, (namespace, big), (other, big)),
        running_daemon(kubeconfig, stream, daemon_settings("gpusched")),
    ):
        for ns in (namespace, other):
            event = await first_event(kube, ns, "quota", "MinimumsExceedCluster")
            assert event["type"] == "Warning"
            assert event["involvedObject"]["kind"] == "ElasticQuota"
            # At least these two (another test's quota may still be going away).
            total = re.match(
                r"the ElasticQuotas' mins of nvidia.com/gpu add up to (\d+) GPUs, more than"
                r" the cluster's \d+ GPUs?: ",
                event["message"],
            )
            assert total is not None and int(total[1]) >= 200_000, event["message"]
            assert "every min of nvidia.com/gpu is scaled down in proportion" in event["message"]
    _no_refused_writes(stream)


async def test_reclaim_when_the_lender_returns(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    """Tenant B borrows the whole pool while tenant A is idle; A comes back within its min
    and takes back, by preemption, exactly what it needs of what B borrowed (equal
    priority: reclaim is not a matter of priority); once B is down to its own min, A's pod
    beyond A's min is not placed by preempting B."""
    kubeconfig = await shipped_identity(kube, cluster, tmp_path, namespace)
    pool = pool_name()
    where = placement(pool)

    tenant_b = f"team-b-{secrets.token_hex(3)}"
    a_quotas = quotas_of(namespace)
    stream = io.StringIO()
    nodes = [pool_node(s, pool) for s in pool_specs(pool, 2)]  # 16 GPUs
    async with (
        labelled_namespaces(kube, tenant_b, 1) as (b,),
        node_pool(kube, nodes),
    ):
        b_quotas = quotas_of(b)
        async with (
            created(
                kube,
                (namespace, elastic_quota("quota", {GPU: 8}, {GPU: 16})),
                (b, elastic_quota("quota", {GPU: 8}, {GPU: 16})),
            ),
            running_daemon(kubeconfig, stream, daemon_settings("gpusched")),
        ):
            # A is idle: B borrows all 16 GPUs (8 above its min).
            b_pods = [f"b{i}" for i in range(4)]
            for name in b_pods:
                await kube.post(pod_path(b), gpu_pod(where, name, 4))
            for name in b_pods:
                await wait_for(kube, pod_path(b), name, bound)
            await wait_for(kube, b_quotas, "quota", used("16"))

            def live(pods: dict[str, JSON]) -> int:
                return sum(1 for p in pods.values() if not p["metadata"].get("deletionTimestamp"))

            # A returns within its min: each of its pods reclaims one of B's borrowed pods.
            for step, name in enumerate(("a1", "a2"), start=1):
                await kube.post(pod_path(namespace), gpu_pod(where, name, 4))
                await wait_for(kube, pod_path(namespace), name, bound, timeout=90)
                await wait_for(kube, a_quotas, "quota", used(str(4 * step)))
                await wait_for(kube, b_quotas, "quota", used(str(16 - 4 * step)))
                pods = await demo.wait_settled(
                    kube, b, (), until=lambda p, left=4 - step: live(p) == left
                )
                assert live(pods) == 4 - step, sorted(pods)
            # Each reclaimed pod says why it went.
            events = await kube.get(
                f"/api/v1/namespaces/{b}/events", query=[("fieldSelector", "reason=Preempted")]
            )
            assert len(events["items"]) == 2, events["items"]

            # B is at its min now: A's third pod would take A above its own min, so it may
            # not preempt B; it stays Pending, and B keeps both pods.
            await kube.post(pod_path(namespace), gpu_pod(where, "a3", 4))
            a3 = await wait_for(kube, pod_path(namespace), "a3", unschedulable, timeout=90)
            assert not a3["spec"].get("nodeName")
            pods = await demo.wait_settled(kube, b, (), until=lambda p: live(p) == 2)
            assert live(pods) == 2 and all(bound(p) for p in pods.values()), sorted(pods)
            await wait_for(kube, b_quotas, "quota", used("8"))
    _no_refused_writes(stream)
