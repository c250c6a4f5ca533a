"""PodGroup status on the real control plane: the daemon watches both PodGroup APIs, and
its embedded kopf operator writes their status while it holds the Lease.

The gang plugin is not needed: the daemon places the members one by one as it does any
pod; the status follows what it sees (pending, refused, bound, Running through KWOK).
The leader runs with the shipped RBAC (manifests/rbac/gpusched.yaml), so every write the
operator makes is one the ClusterRole grants.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from gpusched.devcluster import LocalCluster
from gpusched.devcluster.cluster import write_kubeconfig
from gpusched.devcluster.testkit import pod_manifest, wait_until_allowed
from gpusched.kube import JSON, ApiError, Kube, pod_path
from gpusched.model.pod import GangAPI
from gpusched.operator.board import GangReport
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

pytestmark = pytest.mark.integration

X_API = "/apis/scheduling.x-k8s.io/v1alpha1"
W_API = "/apis/scheduling.k8s.io/v1alpha2"


async def wait_for(
    kube: Kube,
    collection: str,
    name: str,
    check: Callable[[JSON], bool],
    timeout: float = 60.0,  # noqa: ASYNC109
) -> JSON:
    """List, then watch the named object of `collection` until `check` holds; returns it."""
    last: JSON = {}
    selector = ("fieldSelector", f"metadata.name={name}")

    async def run() -> JSON:
        nonlocal last
        while True:
            listing = await kube.get(collection, query=[selector])
            for item in listing.get("items", []):
                last = item
                if check(item):
                    return item
            version = listing["metadata"]["resourceVersion"]
            async for event in kube.watch(collection, resource_version=version, query=[selector]):
                if event.type == "ERROR":
                    break  # 410: list again
                if event.type in ("ADDED", "MODIFIED"):
                    last = event.object
                    if check(event.object):
                        return event.object

    try:
        return await asyncio.wait_for(run(), timeout)
    except TimeoutError:
        raise AssertionError(f"{collection}/{name} never matched; last seen: {last}") from None


def condition(obj: JSON) -> JSON:
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == "PodGroupScheduled":
            return dict(c)
    return {}


def gang_pod(name: str, pool: str, *, x_group: str = "", w_group: str = "", owner: JSON) -> JSON:
    pod = pod_manifest(name, gpus=1, pod_group=x_group or None)
    pod["spec"].update(
        nodeSelector=placement(pool)["node_selector"], tolerations=placement(pool)["tolerations"]
    )
    if w_group:
        pod["spec"]["schedulingGroup"] = {"podGroupName": w_group}
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"],
        }
    ]
    return pod


async def shipped_identity(kube: Kube, cluster: LocalCluster, tmp_path: Path, ns: str) -> Path:
    """A kubeconfig of the shipped ServiceAccount, once its status writes are allowed."""
    docs = list(yaml.safe_load_all(RBAC.read_text()))
    await apply_docs(kube, docs)
    account = next(d["metadata"] for d in docs if d["kind"] == "ServiceAccount")
    user = f"system:serviceaccount:{account['namespace']}:{account['name']}"
    for group in ("scheduling.x-k8s.io", "scheduling.k8s.io"):
        await wait_until_allowed(
            kube, user, "patch", "podgroups", subresource="status", namespace=ns, group=group
        )
        await wait_until_allowed(kube, user, "watch", "podgroups", group=group)
    path = tmp_path / "gpusched.kubeconfig"
    token = await sa_token(kube, account["namespace"], account["name"])
    write_kubeconfig(path, cluster.server, cluster.ca_file, token, "gpusched")
    return path


async def test_the_leader_writes_podgroup_status_of_both_apis(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    kubeconfig = await shipped_identity(kube, cluster, tmp_path, namespace)
    owner = await kube.post(
        f"/api/v1/namespaces/{namespace}/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "train"}},
    )
    await kube.post(
        f"{X_API}/namespaces/{namespace}/podgroups",
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "xg"},
            "spec": {"minMember": 2},
        },
    )
    await kube.post(
        f"{W_API}/namespaces/{namespace}/podgroups",
        {
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "wg"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
        },
    )
    pool = pool_name()
    stream = io.StringIO()
    xg = f"{X_API}/namespaces/{namespace}/podgroups"
    wg = f"{W_API}/namespaces/{namespace}/podgroups"
    # The shipped Lease name: the shipped Role grants get/update on that one only.
    async with running_daemon(kubeconfig, stream, daemon_settings("gpusched"), pod_groups=True):
        # No member yet: the controller's first step.
        await wait_for(kube, xg, "xg", lambda o: o.get("status", {}).get("phase") == "Pending")
        pods = [
            gang_pod("x-0", pool, x_group="xg", owner=owner),
            gang_pod("x-1", pool, x_group="xg", owner=owner),
            gang_pod("w-0", pool, w_group="wg", owner=owner),
            gang_pod("w-1", pool, w_group="wg", owner=owner),
        ]
        for pod in pods:
            await kube.post(pod_path(namespace), pod)
        # The pool has no node yet: every member is refused.
        waiting = await wait_for(
            kube,
            xg,
            "xg",
            lambda o: (
                o.get("status", {}).get("phase") == "Scheduling"
                and "scheduleStartTime" in o["status"]
            ),
        )
        assert waiting["status"]["occupiedBy"] == f"{namespace}/train"
        start = datetime.fromisoformat(waiting["status"]["scheduleStartTime"])
        assert abs((datetime.now(UTC) - start).total_seconds()) < 120
        assert "running" not in waiting["status"]  # omitempty, as the controller writes it
        refused = await wait_for(kube, wg, "wg", lambda o: condition(o).get("status") == "False")
        cond = condition(refused)
        assert cond["reason"] == "Unschedulable"
        assert "nodes are available" in cond["message"], cond
        # kube-scheduler's ObservedGeneration: the object's generation (omitempty when 0).
        generation = refused["metadata"].get("generation", 0)
        assert cond.get("observedGeneration", 0) == generation, refused
        # Why xg waits: an Event on it (its CRD has no conditions).
        event = await first_event(kube, namespace, "xg", "FailedScheduling")
        assert event["type"] == "Warning"
        assert event["message"].startswith("0/2 members placed; Unschedulable: ")
        assert event["involvedObject"]["kind"] == "PodGroup"

        # Nodes arrive: the members are bound and KWOK runs them.
        nodes = [pool_node(s, pool) for s in pool_specs(pool, 2)]
        async with node_pool(kube, nodes):
            running = await wait_for(
                kube, xg, "xg", lambda o: o.get("status", {}).get("phase") == "Running", 120
            )
            assert running["status"]["running"] == 2
            assert running["status"]["occupiedBy"] == f"{namespace}/train"
            assert running["status"]["scheduleStartTime"] == waiting["status"]["scheduleStartTime"]
            scheduled = await wait_for(
                kube, wg, "wg", lambda o: condition(o).get("status") == "True", 120
            )
            cond = condition(scheduled)
            assert (cond["reason"], cond["message"]) == ("Scheduled", "")
            assert cond["lastTransitionTime"] >= condition(refused)["lastTransitionTime"]
            for pod in pods:
                await kube.delete(pod_path(namespace, pod["metadata"]["name"]))

    # kopf left no trace on the objects: no finalizer, no annotation of its own.
    for collection, name in ((xg, "xg"), (wg, "wg")):
        obj = await kube.get(f"{collection}/{name}")
        annotations = obj["metadata"].get("annotations") or {}
        assert not [k for k in annotations if "kopf" in k], annotations
        assert not [f for f in obj["metadata"].get("finalizers", []) if "kopf" in f]
    # Every write was allowed by the shipped RBAC.
    lines = [orjson.loads(line) for line in stream.getvalue().splitlines()]
    refused_writes = [
        r
        for r in lines
        if r.get("event") == "background write failed" or "forbidden" in str(r).lower()
    ]
    assert refused_writes == [], refused_writes


async def test_a_standby_publishes_but_does_not_write(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    lease = f"gpusched-standby-{namespace[-6:]}"
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    await kube.post(
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": lease},
            "spec": {
                "holderIdentity": "someone-else",
                "leaseDurationSeconds": 3600,
                "acquireTime": now,
                "renewTime": now,
            },
        },
    )
    await kube.post(
        f"{X_API}/namespaces/{namespace}/podgroups",
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "xs"},
            "spec": {"minMember": 1},
        },
    )
    stream = io.StringIO()
    try:
        async with running_daemon(
            cluster.kubeconfig, stream, daemon_settings(lease), lead=False, pod_groups=True
        ) as daemon:
            assert daemon.gang_board is not None
            seen = asyncio.Event()
            key = (GangAPI.COSCHEDULING, f"{namespace}/xs")

            def heard(changed: frozenset[tuple[GangAPI, str]]) -> None:
                report = daemon.gang_board.get(*key) if daemon.gang_board else None
                if key in changed and report is not None and report.pending == 1:
                    seen.set()

            daemon.gang_board.subscribe(heard)
            await kube.post(pod_path(namespace), pod_manifest("xs-0", pod_group="xs"))
            await asyncio.wait_for(seen.wait(), 30)
            assert daemon.gang_board.get(*key) == GangReport(
                GangAPI.COSCHEDULING, f"{namespace}/xs", pending=1
            )
            assert not daemon.leading.is_set()
            assert daemon.status_operator is None  # only the leader runs it
            obj: dict[str, Any] = await kube.get(f"{X_API}/namespaces/{namespace}/podgroups/xs")
            assert not obj.get("status"), obj["status"]
    finally:
        try:
            await kube.delete(f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{lease}")
        except ApiError as exc:
            if exc.status != 404:
                raise
