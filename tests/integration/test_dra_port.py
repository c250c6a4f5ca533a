"""The DRA port against the real control plane (kube/dra.py): its watches see classes,
slices and claims; its writes (kube-scheduler's bindClaim, Unreserve and PostFilter
deallocation) go through with the shipped ServiceAccount's rights; the
kube-controller-manager's resourceclaim controller makes claims from templates, which
PodInfo.pod_claims resolves.

Objects are shaped like NVIDIA's DRA driver publishes them (tests/dra_builders.py). No
scheduler touches them: the pods name a scheduler that is not running.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest
import yaml

from gpusched.devcluster import LocalCluster
from gpusched.devcluster.cluster import write_kubeconfig
from gpusched.devcluster.testkit import pod_manifest, wait_until_allowed
from gpusched.framework.dra import DraChange, DraWriteError
from gpusched.framework.status import Code
from gpusched.kube import JSON, ApiError, Kube, pod_path, wait_for
from gpusched.kube.dra import API, KubeDra, claim_path
from gpusched.model.dra import (
    FINALIZER,
    AllocationResult,
    DeviceResult,
    ResourceClaim,
    resource_claim_from_k8s,
)
from gpusched.model.pod import PodInfo, pod_from_k8s
from tests.dra_builders import DRIVER, gpu_allocation, gpu_claim, gpu_class, gpu_slice
from tests.integration.daemon_support import RBAC, apply_docs, sa_token

pytestmark = pytest.mark.integration

NOT_RUNNING = "nobody-schedules-this"


async def shipped_kube(kube: Kube, cluster: LocalCluster, tmp_path: Path, ns: str) -> Kube:
    """A client acting as the shipped ServiceAccount, once its DRA rights are in force."""
    docs = list(yaml.safe_load_all(RBAC.read_text()))
    await apply_docs(kube, docs)
    account = next(d["metadata"] for d in docs if d["kind"] == "ServiceAccount")
    user = f"system:serviceaccount:{account['namespace']}:{account['name']}"
    group = "resource.k8s.io"
    for resource in ("deviceclasses", "resourceslices", "resourceclaims"):
        await wait_until_allowed(kube, user, "watch", resource, group=group)
    for verb, sub in (("patch", ""), ("patch", "status"), ("patch", "binding")):
        await wait_until_allowed(
            kube, user, verb, "resourceclaims", subresource=sub, namespace=ns, group=group
        )
    path = tmp_path / "gpusched.kubeconfig"
    token = await sa_token(kube, account["namespace"], account["name"])
    write_kubeconfig(path, cluster.server, cluster.ca_file, token, "gpusched")
    return await Kube.connect(path)


class Watched:
    """A running KubeDra and a way to wait, on its own change reports, until it sees
    something (no polling, no sleeps)."""

    def __init__(self, kube: Kube) -> None:
        self.changed = asyncio.Condition()
        self.changes: list[DraChange] = []
        self.dra = KubeDra(kube, on_change=self._on_change)

    def _on_change(self, change: DraChange) -> None:
        self.changes.append(change)

        async def notify() -> None:
            async with self.changed:
                self.changed.notify_all()

        asyncio.get_running_loop().create_task(notify())

    async def until(self, check: Callable[[], bool], what: str, timeout: float = 30) -> None:  # noqa: ASYNC109
        try:
            async with asyncio.timeout(timeout), self.changed:
                await self.changed.wait_for(check)
        except TimeoutError:
            raise AssertionError(f"the port never saw {what}") from None


@asynccontextmanager
async def running(kube: Kube) -> AsyncIterator[Watched]:
    watched = Watched(kube)
    task = asyncio.create_task(watched.dra.run())
    try:
        await asyncio.wait_for(watched.dra.wait_synced(), 30)
        assert not any(r.unserved for r in watched.dra.reflectors), "resource.k8s.io/v1 unserved"
        yield watched
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@asynccontextmanager
async def cluster_objects(kube: Kube, docs: list[tuple[str, JSON]]) -> AsyncIterator[None]:
    """Create cluster-scoped objects (a DeviceClass, a ResourceSlice) and delete them after."""
    made: list[str] = []
    try:
        for collection, doc in docs:
            await kube.post(collection, doc)
            made.append(f"{collection}/{doc['metadata']['name']}")
        yield
    finally:
        for path in made:
            try:
                await kube.delete(path)
            except ApiError as exc:
                if exc.status != 404:
                    raise


def fresh(doc: JSON, name: str) -> JSON:
    """The builder's object renamed, without the uid and resourceVersion the server sets."""
    doc["metadata"] = {"name": name}
    return doc


def claim_spec(ns: str) -> JSON:
    spec: JSON = gpu_claim("x")["spec"]
    spec["devices"]["requests"][0]["exactly"]["deviceClassName"] = f"{ns}-gpu"
    return spec


async def create_claim(kube: Kube, ns: str, name: str) -> ResourceClaim:
    raw: JSON = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim"}
    raw |= {"metadata": {"name": name}, "spec": claim_spec(ns)}
    return resource_claim_from_k8s(await kube.post(f"{API}/namespaces/{ns}/resourceclaims", raw))


async def create_pod(kube: Kube, ns: str, name: str, claims: list[JSON]) -> PodInfo:
    pod = pod_manifest(name, scheduler_name=NOT_RUNNING)
    pod["spec"]["resourceClaims"] = claims
    return pod_from_k8s(await kube.post(pod_path(ns), pod))


def gpu_objects(kube: Kube, ns: str, node: str) -> AbstractAsyncContextManager[None]:
    """This test's DeviceClass and one node's ResourceSlice of 8 GPUs."""
    klass = fresh(gpu_class(), f"{ns}-gpu")
    rs = fresh(gpu_slice(node), f"{node}-gpu.nvidia.com")
    return cluster_objects(kube, [(f"{API}/deviceclasses", klass), (f"{API}/resourceslices", rs)])


def ours(node: str, *devices: int) -> AllocationResult:
    base = gpu_allocation(node, *devices)
    return AllocationResult(
        results=tuple(DeviceResult("gpu", DRIVER, node, f"gpu-{i}") for i in devices),
        node_selector=base["nodeSelector"],
    )


async def test_the_port_watches_and_writes_with_the_shipped_rights(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    node = f"dra-{secrets.token_hex(3)}"
    sa = await shipped_kube(kube, cluster, tmp_path, ns)
    async with sa, gpu_objects(kube, ns, node), running(sa) as w:
        dra = w.dra
        claim = await create_claim(kube, ns, "train")
        await w.until(lambda: dra.claim(ns, "train") is not None, "the claim")
        await w.until(lambda: dra.device_class(f"{ns}-gpu") is not None, "the class")
        await w.until(
            lambda: any(s.node_name == node for s in dra.slices_for_node(node)), "the slice"
        )
        (seen_slice,) = [s for s in dra.slices_for_node(node) if s.node_name == node]
        assert seen_slice.errors == () and len(seen_slice.devices) == 8
        assert seen_slice.devices[5].attributes["gpu.nvidia.com/index"].value == 5
        pod = await create_pod(kube, ns, "trainer", [{"name": "gpu", "resourceClaimName": "train"}])

        # In flight: counted as allocated before anything is written.
        dra.assume(dataclasses.replace(claim, allocation=ours(node, 2, 3)))
        # This namespace's claims: other tests leave allocated claims in namespaces still
        # being deleted (they keep their finalizer until deallocated).
        assert [c.name for c in dra.allocated_claims() if c.namespace == ns] == ["train"]

        written, status = await dra.allocate(claim, ours(node, 2, 3), pod)
        assert status.is_success(), status
        assert written is not None and dra.inflight == {}
        raw = await kube.get(claim_path(ns, "train"))
        assert FINALIZER in raw["metadata"]["finalizers"]
        results = raw["status"]["allocation"]["devices"]["results"]
        assert [(r["driver"], r["pool"], r["device"]) for r in results] == [
            (DRIVER, node, "gpu-2"),
            (DRIVER, node, "gpu-3"),
        ]
        assert raw["status"]["allocation"]["allocationTimestamp"]
        assert raw["status"]["reservedFor"] == [
            {"resource": "pods", "name": "trainer", "uid": pod.uid}
        ]
        # The watch catches up with our write; the written copy is dropped.
        await w.until(lambda: dra.written == {}, "our write")
        now = dra.claim(ns, "train")
        assert now is not None and now.allocation is not None and len(now.reserved_for) == 1

        # Unreserve: the pod's entry goes, the allocation stays (kube's Unreserve) ...
        assert (await dra.unreserve(now, pod)).is_success()
        raw = await kube.get(claim_path(ns, "train"))
        assert not raw["status"].get("reservedFor") and raw["status"]["allocation"]
        await w.until(
            lambda: (c := dra.claim(ns, "train")) is not None and not c.reserved_for,
            "the reservation gone",
        )
        # ... and PostFilter's deallocation clears it.
        current = dra.claim(ns, "train")
        assert current is not None
        assert (await dra.deallocate(current, pod)).is_success()
        raw = await kube.get(claim_path(ns, "train"))
        assert "allocation" not in raw["status"]
        await w.until(
            lambda: not [c for c in dra.allocated_claims() if c.namespace == ns], "the deallocation"
        )


async def test_a_claim_allocated_elsewhere_meanwhile_is_a_conflict_and_nothing_is_written(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    node = f"dra-{secrets.token_hex(3)}"
    sa = await shipped_kube(kube, cluster, tmp_path, ns)
    async with sa, gpu_objects(kube, ns, node), running(sa) as w:
        dra = w.dra
        await create_claim(kube, ns, "contested")
        await create_claim(kube, ns, "labelled")
        await w.until(
            lambda: (
                dra.claim(ns, "contested") is not None and dra.claim(ns, "labelled") is not None
            ),
            "both claims",
        )
        contested, labelled = dra.claim(ns, "contested"), dra.claim(ns, "labelled")
        assert contested is not None and labelled is not None
        pod = await create_pod(
            kube,
            ns,
            "p",
            [
                {"name": "a", "resourceClaimName": "contested"},
                {"name": "b", "resourceClaimName": "labelled"},
            ],
        )
        # Another scheduler allocates "contested" after we decided on it.
        theirs = await kube.merge_patch(
            claim_path(ns, "contested", "status"),
            {"status": {"allocation": gpu_allocation(node, 7)}},
        )
        written, status = await dra.allocate(contested, ours(node, 6), pod)
        assert written is None and status.code is Code.ERROR
        assert status.message() == f"claim {ns}/contested got allocated elsewhere in the meantime"
        assert isinstance(status.error, DraWriteError) and status.error.status == 409
        after = await kube.get(claim_path(ns, "contested"))
        # Nothing of ours landed: no finalizer, their allocation, no reservation.
        assert FINALIZER not in after["metadata"].get("finalizers", [])
        assert after["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]
        assert after["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-7"
        assert not after["status"].get("reservedFor")

        # A change that leaves the claim free (a label) is retried on a fresh copy, as
        # bindClaim's RetryOnConflict does.
        await kube.merge_patch(
            claim_path(ns, "labelled"), {"metadata": {"labels": {"team": "vision"}}}
        )
        written, status = await dra.allocate(labelled, ours(node, 5), pod)
        assert status.is_success(), status
        raw = await kube.get(claim_path(ns, "labelled"))
        assert raw["metadata"]["labels"] == {"team": "vision"}
        assert raw["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-5"

        # A write refused outright (a stale deallocation) is a 409 from the API server.
        status = await dra.deallocate(labelled, pod)
        assert isinstance(status.error, DraWriteError) and status.error.status == 409
        assert "Operation cannot be fulfilled" in status.message()


async def test_claims_from_a_template_are_resolved_for_the_pod(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    """kube-controller-manager's resourceclaim controller makes the pod's claim from the
    template and records it in pod.status.resourceClaimStatuses."""
    ns = namespace
    node = f"dra-{secrets.token_hex(3)}"
    sa = await shipped_kube(kube, cluster, tmp_path, ns)
    async with sa, gpu_objects(kube, ns, node), running(sa) as w:
        await kube.post(
            f"{API}/namespaces/{ns}/resourceclaimtemplates",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "one-gpu"},
                "spec": {"spec": claim_spec(ns)},
            },
        )
        created = await create_pod(
            kube, ns, "worker", [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
        )
        # Before the controller: a template entry without a claim yet (or already made).
        assert created.pod_claims[0].template == "one-gpu"
        raw = await wait_for(
            kube,
            pod_path(ns),
            "worker",
            lambda p: bool(p.get("status", {}).get("resourceClaimStatuses")),
            what="the resourceclaim controller",
        )
        pod = pod_from_k8s(raw)
        (pc,) = pod.pod_claims
        assert pc.name == "gpu" and pc.template == "one-gpu" and not pc.not_needed
        assert pc.claim and pc.claim.startswith("worker-gpu-")
        await w.until(lambda: w.dra.claim(ns, pc.claim) is not None, "the generated claim")
        claim = w.dra.claim(ns, pc.claim)
        assert claim is not None and claim.errors == ()
        # Made for this pod: the owner the plugin checks, and the pod's name for it.
        assert claim.owner_pod_uid == pod.uid and claim.pod_claim_name == "gpu"
        assert claim.requests[0].alternatives[0].device_class == f"{ns}-gpu"
