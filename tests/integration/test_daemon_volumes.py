"""kube-scheduler's volume plugins in the daemon, on the real control plane with
kube-controller-manager's persistentvolume-binder-controller (issue 11). Waits by
watching, never by sleeping.

Each test makes its own StorageClass and PersistentVolumes (cluster-scoped, named after its
private node pool) and deletes them afterwards.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest

from gpusched.devcluster import LocalCluster
from gpusched.devcluster.demo import demo_pod, wait_settled
from gpusched.kube import JSON, ApiError, Kube, wait_for
from tests.integration.daemon_support import (
    create_pods,
    events_for,
    node_pool,
    placement,
    pool_name,
    pool_node,
    pool_specs,
    running_daemon,
    until_bound,
)

pytestmark = pytest.mark.integration

ONE_T4 = ((2, "T4", 32_000, 131_072, 0),)
PVS = "/api/v1/persistentvolumes"
CLASSES = "/apis/storage.k8s.io/v1/storageclasses"
HOSTNAME = "kubernetes.io/hostname"


def local_pv(name: str, node: str, cls: str, size: str = "1Gi") -> JSON:
    """A local volume on `node` (its node affinity on the hostname label)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": cls,
            "persistentVolumeReclaimPolicy": "Retain",
            "local": {"path": f"/mnt/disks/{name}"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": HOSTNAME, "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                }
            },
        },
    }


def claim(
    name: str,
    cls: str,
    *,
    size: str = "1Gi",
    modes: Sequence[str] = ("ReadWriteOnce",),
    volume: str = "",
) -> JSON:
    spec: dict[str, Any] = {
        "accessModes": list(modes),
        "resources": {"requests": {"storage": size}},
        "storageClassName": cls,
    }
    if volume:
        spec["volumeName"] = volume
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": spec,
    }


def with_claim(pod: JSON, claim_name: str) -> JSON:
    pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]
    return pod


@asynccontextmanager
async def storage(kube: Kube, classes: Sequence[JSON], pvs: Sequence[JSON]) -> AsyncIterator[None]:
    """Create the classes and volumes; delete them afterwards."""
    for sc in classes:
        await kube.post(CLASSES, sc)
    for pv in pvs:
        await kube.post(PVS, pv)
    try:
        yield
    finally:
        for path, objs in ((PVS, pvs), (CLASSES, classes)):
            for obj in objs:
                try:
                    await kube.delete(f"{path}/{obj['metadata']['name']}")
                except ApiError as exc:
                    if exc.status != 404:
                        raise


def storage_class(name: str, provisioner: str, mode: str) -> JSON:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": mode,
    }


def claims_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/persistentvolumeclaims"


async def bound_claim(kube: Kube, namespace: str, name: str) -> JSON:
    return await wait_for(
        kube,
        claims_path(namespace),
        name,
        lambda c: c.get("status", {}).get("phase") == "Bound",
        what="the claim Bound",
    )


async def test_wait_for_first_consumer_lands_on_the_node_of_a_free_volume(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    nodes = [pool_node(s, pool) for s in pool_specs(pool, 3, shapes=ONE_T4)]
    names = [n["metadata"]["name"] for n in nodes]
    cls = f"local-{pool}"
    # The only volume big enough is on the third node; the second node's is too small.
    pvs = [
        local_pv(f"{pool}-small", names[1], cls, "1Gi"),
        local_pv(f"{pool}-big", names[2], cls, "5Gi"),
    ]
    stream = io.StringIO()
    async with (
        node_pool(kube, nodes),
        storage(
            kube, [storage_class(cls, "kubernetes.io/no-provisioner", "WaitForFirstConsumer")], pvs
        ),
        running_daemon(cluster.kubeconfig, stream),
    ):
        await kube.post(claims_path(namespace), claim("data", cls, size="3Gi"))
        await create_pods(kube, namespace, [with_claim(demo_pod("db", **placement(pool)), "data")])
        bound = await until_bound(kube, namespace, ["db"], 1)
        assert bound["db"]["spec"]["nodeName"] == names[2]
        # PreBind set the volume's claimRef; the PV controller completed the binding.
        pvc = await bound_claim(kube, namespace, "data")
        assert pvc["spec"]["volumeName"] == f"{pool}-big"
        pv = await kube.get(f"{PVS}/{pool}-big")
        assert pv["spec"]["claimRef"]["name"] == "data"
        assert pv["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] == "yes"


async def test_an_unbound_immediate_claim_is_reported_with_kubes_message(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    nodes = [pool_node(s, pool) for s in pool_specs(pool, 1, shapes=ONE_T4)]
    cls = f"immediate-{pool}"
    stream = io.StringIO()
    async with (
        node_pool(kube, nodes),
        # A provisioner nobody runs: the claim stays Pending.
        storage(kube, [storage_class(cls, "example.com/nobody", "Immediate")], []),
        running_daemon(cluster.kubeconfig, stream),
    ):
        await kube.post(claims_path(namespace), claim("pending", cls))
        await create_pods(
            kube, namespace, [with_claim(demo_pod("waits", **placement(pool)), "pending")]
        )
        final = await wait_settled(kube, namespace, ["waits"])
        assert not final["waits"]["spec"].get("nodeName")
        events = await events_for(kube, namespace, "waits", "FailedScheduling")
        message = events[0]["message"]
        assert message.startswith("0/")
        assert message.endswith(
            " nodes are available: pod has unbound immediate PersistentVolumeClaims."
        )


async def test_a_bound_volume_with_node_affinity_pins_the_pod(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    nodes = [pool_node(s, pool) for s in pool_specs(pool, 3, shapes=ONE_T4)]
    names = [n["metadata"]["name"] for n in nodes]
    stream = io.StringIO()
    pv = local_pv(f"{pool}-pinned", names[1], "")
    async with (
        node_pool(kube, nodes),
        storage(kube, [], [pv]),
        running_daemon(cluster.kubeconfig, stream),
    ):
        # Pre-bound to the volume, no class: the PV controller binds it before the pod comes.
        await kube.post(claims_path(namespace), claim("pinned", "", volume=f"{pool}-pinned"))
        await bound_claim(kube, namespace, "pinned")
        pods = [with_claim(demo_pod(f"user-{i}", **placement(pool)), "pinned") for i in range(2)]
        await create_pods(kube, namespace, pods)
        bound = await until_bound(kube, namespace, ["user-0", "user-1"], 2)
        assert {p["spec"]["nodeName"] for p in bound.values()} == {names[1]}


async def test_one_read_write_many_volume_shared_by_several_pods(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    nodes = [pool_node(s, pool) for s in pool_specs(pool, 2, shapes=ONE_T4)]
    stream = io.StringIO()
    nfs = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"{pool}-nfs"},
        "spec": {
            "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "persistentVolumeReclaimPolicy": "Retain",
            "nfs": {"server": "nfs.example.com", "path": "/exports/shared"},
        },
    }
    async with (
        node_pool(kube, nodes),
        storage(kube, [], [nfs]),
        running_daemon(cluster.kubeconfig, stream),
    ):
        await kube.post(
            claims_path(namespace),
            claim("shared", "", size="10Gi", modes=("ReadWriteMany",), volume=f"{pool}-nfs"),
        )
        await bound_claim(kube, namespace, "shared")
        names = [f"reader-{i}" for i in range(4)]
        await create_pods(
            kube, namespace, [with_claim(demo_pod(n, **placement(pool)), "shared") for n in names]
        )
        bound = await until_bound(kube, namespace, names, 4)
        pool_nodes = {n["metadata"]["name"] for n in nodes}
        assert {p["spec"]["nodeName"] for p in bound.values()} <= pool_nodes


async def test_a_generic_ephemeral_volume_gets_its_claim_from_the_controller_and_a_volume(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    nodes = [pool_node(s, pool) for s in pool_specs(pool, 2, shapes=ONE_T4)]
    names = [n["metadata"]["name"] for n in nodes]
    cls = f"scratch-{pool}"
    stream = io.StringIO()
    pod = demo_pod("job", **placement(pool))
    pod["spec"]["volumes"] = [
        {
            "name": "scratch",
            "ephemeral": {
                "volumeClaimTemplate": {
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": cls,
                        "resources": {"requests": {"storage": "1Gi"}},
                    }
                }
            },
        }
    ]
    async with (
        node_pool(kube, nodes),
        storage(
            kube,
            [storage_class(cls, "kubernetes.io/no-provisioner", "WaitForFirstConsumer")],
            [local_pv(f"{pool}-scratch", names[0], cls)],
        ),
        running_daemon(cluster.kubeconfig, stream),
    ):
        # The pod comes first; the ephemeral-volume controller then makes job-scratch, and
        # that claim's arrival wakes the pod the first attempt turned away.
        await create_pods(kube, namespace, [pod])
        bound = await until_bound(kube, namespace, ["job"], 1)
        assert bound["job"]["spec"]["nodeName"] == names[0]
        pvc = await bound_claim(kube, namespace, "job-scratch")
        assert pvc["spec"]["volumeName"] == f"{pool}-scratch"
        assert pvc["metadata"]["ownerReferences"][0]["uid"] == bound["job"]["metadata"]["uid"]


async def test_two_pods_never_take_one_volume(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    nodes = [pool_node(s, pool) for s in pool_specs(pool, 1, shapes=ONE_T4)]
    cls = f"one-{pool}"
    stream = io.StringIO()
    async with (
        node_pool(kube, nodes),
        storage(
            kube,
            [storage_class(cls, "kubernetes.io/no-provisioner", "WaitForFirstConsumer")],
            [local_pv(f"{pool}-only", nodes[0]["metadata"]["name"], cls)],
        ),
        running_daemon(cluster.kubeconfig, stream),
    ):
        for c in ("a", "b"):
            await kube.post(claims_path(namespace), claim(c, cls))
        pods = [with_claim(demo_pod(f"pod-{c}", **placement(pool)), c) for c in ("a", "b")]
        await create_pods(kube, namespace, pods)
        final = await wait_settled(kube, namespace, ["pod-a", "pod-b"])
        winners = [n for n, p in final.items() if p["spec"].get("nodeName")]
        assert len(winners) == 1
        (loser,) = {"pod-a", "pod-b"} - set(winners)
        events = await events_for(kube, namespace, loser, "FailedScheduling")
        # The session's other nodes fail the pool's node selector first: only ours counts.
        assert "1 node(s) didn't find available persistent volumes to bind" in events[0]["message"]
        won = await bound_claim(kube, namespace, winners[0].removeprefix("pod-"))
        assert won["spec"]["volumeName"] == f"{pool}-only"
