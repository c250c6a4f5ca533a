"""kube-scheduler (the peer) allocates DRA claims against the NVIDIA-shaped ResourceSlices of
gpusched.devcluster.dra_fixtures, on the local control plane; the independent audit
(gpusched.devcluster.dra_audit) finds nothing wrong with what it did, and does find a
double allocation written into a claim's status by hand. Waits by watching, never sleeps.

This proves the fixtures are slices kube-scheduler's allocator accepts (exclusive GPUs, a
matchAttribute on the PCIe root and on the NVLink partition, a share by capacity, MIG
placements limited by shared counters, the nvidia.com/gpu extended resource mapped by the
DeviceClass, a Job's ResourceClaimTemplate) and that the audit can fail.

The DRA nodes are private to the test (random names), tainted so no other test's pod lands
on them, and carry no nvidia.com/gpu capacity (a DRA driver's node has no device plugin);
deleting them must take their slices with them (ownerReferences, garbage collector).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gpusched.devcluster import NodeSpec, node_object
from gpusched.devcluster.dra_audit import Violation, audit
from gpusched.devcluster.dra_fixtures import (
    DRIVER,
    GPU_CLASS,
    MIG_CLASS,
    PCIE_ROOT,
    RESOURCE_API,
    SLICES,
    DraNode,
    Publisher,
    node_slices,
)
from gpusched.devcluster.testkit import pod_manifest, watch_items
from gpusched.kube import (
    JSON,
    ApiError,
    Kube,
    create_nodes,
    create_pod,
    pod_path,
    wait_for,
    wait_for_deletion,
)

pytestmark = pytest.mark.integration

TAINT = "gpusched.io/dra-peer-test"
CLAIMS = "resourceclaims"
HOSTNAME = "kubernetes.io/hostname"
TEMPLATES = Path(__file__).parents[2] / "manifests/examples/dra/gpu-claim-templates.yaml"


@dataclass(frozen=True)
class Nodes:
    pairs: str  # 8 H100, two per PCIe root, NVLink (Fabric Manager) partitions
    singles: str  # 8 H100
    shared: str  # 1 H100 shareable by memory (the consumable-capacity variant)
    mig: str  # 1 A100-80GB published as partitionable (DynamicMIG)


def _node(name: str) -> JSON:
    node = node_object(NodeSpec(name, 0, "", 64_000, 524_288, "rack-dra", "spine-dra"))
    node["spec"]["taints"] = [{"key": TAINT, "value": "true", "effect": "NoSchedule"}]
    return node


@pytest.fixture
async def dra_nodes(kube: Kube) -> AsyncIterator[Nodes]:
    tag = secrets.token_hex(3)
    nodes = Nodes(*(f"dra-{tag}-{role}" for role in ("pairs", "singles", "shared", "mig")))
    names = [nodes.pairs, nodes.singles, nodes.shared, nodes.mig]
    await create_nodes(kube, [_node(n) for n in names])
    publisher = Publisher(kube)
    await publisher.install_classes()
    try:
        await publisher.publish(DraNode(nodes.pairs, 8, fabric_partitions=True))
        await publisher.publish(DraNode(nodes.singles, 8))
        await publisher.publish(DraNode(nodes.shared, 1), "shared")
        await publisher.publish(DraNode(nodes.mig, 1, product="A100-SXM4-80GB"), "partitionable")
        yield nodes
    finally:
        for name in names:
            try:
                await kube.delete(f"/api/v1/nodes/{name}")
            except ApiError as exc:
                if exc.status != 404:
                    raise


def claims_path(namespace: str, name: str = "") -> str:
    base = f"{RESOURCE_API}/namespaces/{namespace}/{CLAIMS}"
    return f"{base}/{name}" if name else base


def exactly(cls: str, count: int = 1, **extra: object) -> JSON:
    return {"deviceClassName": cls, "allocationMode": "ExactCount", "count": count, **extra}


def claim(name: str, requests: Sequence[JSON], constraints: Sequence[JSON] = ()) -> JSON:
    devices: JSON = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = list(constraints)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": devices},
    }


def dra_pod(name: str, node: str, claims: dict[str, str] | None = None, *, gpus: int = 0) -> JSON:
    """A default-scheduler pod pinned to `node` (by hostname) using `claims` (pod claim name
    -> ResourceClaim name) or, with `gpus`, the nvidia.com/gpu extended resource."""
    pod = pod_manifest(name, gpus=gpus, scheduler_name=None)
    spec = pod["spec"]
    spec["nodeSelector"] = {HOSTNAME: node}
    spec["tolerations"] = [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    if claims:
        spec["resourceClaims"] = [
            {"name": k, "resourceClaimName": v} for k, v in sorted(claims.items())
        ]
        spec["containers"][0]["resources"]["claims"] = [{"name": k} for k in sorted(claims)]
    return pod


async def wait_running(kube: Kube, namespace: str, names: Sequence[str]) -> dict[str, JSON]:
    wanted = {f"{namespace}/{n}" for n in names}

    def done(items: dict[str, JSON]) -> bool:
        return all(items.get(k, {}).get("status", {}).get("phase") == "Running" for k in wanted)

    def explain(items: dict[str, JSON]) -> str:
        return "; ".join(
            f"{k}: {items.get(k, {}).get('status', {}).get('conditions')}" for k in sorted(wanted)
        )

    return await watch_items(
        kube, pod_path(namespace), done, timeout=90, what="pods Running", explain=explain
    )


async def allocated(kube: Kube, namespace: str, name: str) -> JSON:
    return await wait_for(
        kube,
        claims_path(namespace),
        name,
        lambda c: bool(c.get("status", {}).get("allocation")),
        what="claim allocated",
    )


def results(claim_obj: JSON) -> list[JSON]:
    found: list[JSON] = claim_obj["status"]["allocation"]["devices"]["results"]
    return found


def device_attrs(slices: Sequence[JSON], device: str) -> JSON:
    for s in slices:
        for d in s["spec"].get("devices") or ():
            if d["name"] == device:
                attributes: JSON = d["attributes"]
                return attributes
    raise AssertionError(f"device {device} not published")


async def test_kube_scheduler_allocates_the_nvidia_slices_and_the_audit_agrees(
    kube: Kube, namespace: str, dra_nodes: Nodes
) -> None:
    n = dra_nodes
    ns = namespace
    pcie = {"matchAttribute": PCIE_ROOT}
    nvlink = {"matchAttribute": f"{DRIVER}/partition2"}
    mig_3g = {"cel": {"expression": f"device.attributes['{DRIVER}'].profile == '3g.40gb'"}}
    bodies = [
        claim("one", [{"name": "gpu", "exactly": exactly(GPU_CLASS)}]),
        claim("pcie-pair", [{"name": "gpus", "exactly": exactly(GPU_CLASS, 2)}], [pcie]),
        claim("nvlink-pair", [{"name": "gpus", "exactly": exactly(GPU_CLASS, 2)}], [nvlink]),
        # firstAvailable: an 8-GPU ask no node has, then one GPU.
        claim(
            "fallback",
            [
                {
                    "name": "gpu",
                    "firstAvailable": [
                        {"name": "eight", **exactly(GPU_CLASS, 8)},
                        {"name": "one", **exactly(GPU_CLASS, 1)},
                    ],
                }
            ],
        ),
        *(
            claim(
                f"share-{i}",
                [
                    {
                        "name": "gpu",
                        "exactly": exactly(GPU_CLASS, capacity={"requests": {"memory": "30Gi"}}),
                    }
                ],
            )
            for i in (1, 2)
        ),
        *(
            claim(f"mig-{i}", [{"name": "mig", "exactly": exactly(MIG_CLASS, selectors=[mig_3g])}])
            for i in (1, 2)
        ),
        claim("mig-full", [{"name": "gpu", "exactly": exactly(GPU_CLASS)}]),
    ]
    for body in bodies:
        await kube.post(claims_path(ns), body)
    # The example templates, applied as written; the Job uses "one-gpu".
    for template in filter(None, yaml.safe_load_all(TEMPLATES.read_text())):
        await kube.post(f"{RESOURCE_API}/namespaces/{ns}/resourceclaimtemplates", template)
    job_pod = dra_pod("unused", n.singles)
    job_pod["spec"]["restartPolicy"] = "Never"
    job_pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    job_pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "trainer"},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {"metadata": {"labels": {"app": "trainer"}}, "spec": job_pod["spec"]},
        },
    }
    # KWOK completes a Job's pods as soon as they run and the resourceclaim controller then
    # deletes their generated claims, so record each claim while it is allocated and
    # reserved, from a watch started before the Job.
    job_claims: dict[str, JSON] = {}

    def record(items: dict[str, JSON]) -> bool:
        for key, c in items.items():
            owners = c["metadata"].get("ownerReferences") or ()
            ours = any(o["kind"] == "Pod" and o["name"].startswith("trainer-") for o in owners)
            if ours and c.get("status", {}).get("allocation") and c["status"].get("reservedFor"):
                job_claims[key] = c
        return len(job_claims) >= 2

    job_watch = asyncio.create_task(
        watch_items(kube, claims_path(ns), record, timeout=90, what="the Job's claims in use")
    )
    await kube.post(f"/apis/batch/v1/namespaces/{ns}/jobs", job)

    pods = {
        "p-one": dra_pod("p-one", n.singles, {"gpu": "one"}),
        "p-fallback": dra_pod("p-fallback", n.singles, {"gpu": "fallback"}),
        "p-extended": dra_pod("p-extended", n.singles, gpus=1),
        "p-pcie": dra_pod("p-pcie", n.pairs, {"gpus": "pcie-pair"}),
        "p-nvlink": dra_pod("p-nvlink", n.pairs, {"gpus": "nvlink-pair"}),
        "p-share-1": dra_pod("p-share-1", n.shared, {"gpu": "share-1"}),
        "p-share-2": dra_pod("p-share-2", n.shared, {"gpu": "share-2"}),
        "p-mig-1": dra_pod("p-mig-1", n.mig, {"mig": "mig-1"}),
        "p-mig-2": dra_pod("p-mig-2", n.mig, {"mig": "mig-2"}),
    }
    for pod in pods.values():
        await create_pod(kube, ns, pod)
    running = await wait_running(kube, ns, list(pods))
    assert all(running[f"{ns}/{p}"]["spec"]["nodeName"] for p in pods)

    # What kube-scheduler chose, read back.
    pairs = await node_slices(kube, n.pairs)
    pcie_claim = await allocated(kube, ns, "pcie-pair")
    roots = {device_attrs(pairs, r["device"])[PCIE_ROOT]["string"] for r in results(pcie_claim)}
    assert len(results(pcie_claim)) == 2 and len(roots) == 1, results(pcie_claim)
    nvlink_claim = await allocated(kube, ns, "nvlink-pair")
    groups = {device_attrs(pairs, r["device"])["partition2"]["int"] for r in results(nvlink_claim)}
    assert len(results(nvlink_claim)) == 2 and len(groups) == 1, results(nvlink_claim)
    fallback = await allocated(kube, ns, "fallback")
    assert [r["request"] for r in results(fallback)] == ["gpu/one"]

    shares = [results(await allocated(kube, ns, f"share-{i}"))[0] for i in (1, 2)]
    assert shares[0]["device"] == shares[1]["device"] == "gpu-0"
    assert shares[0]["shareID"] != shares[1]["shareID"]
    assert all(r["consumedCapacity"]["memory"] == "30Gi" for r in shares)

    migs = [results(await allocated(kube, ns, f"mig-{i}"))[0]["device"] for i in (1, 2)]
    assert sorted(migs) == ["gpu-0-mig-3g40gb-9-0", "gpu-0-mig-3g40gb-9-4"]

    extended = running[f"{ns}/p-extended"]["status"].get("extendedResourceClaimStatus") or {}
    assert extended.get("resourceClaimName"), running[f"{ns}/p-extended"]["status"]
    await job_watch
    assert {results(c)[0]["pool"] for c in job_claims.values()} == {n.singles}
    await wait_for(
        kube,
        f"/apis/batch/v1/namespaces/{ns}/jobs",
        "trainer",
        lambda j: j.get("status", {}).get("succeeded") == 2,
        what="Job trainer succeeded twice",
        timeout=90,
    )

    # Both 3g.40gb placements hold all eight memory slices: the full GPU's counters are gone,
    # so kube-scheduler must refuse it (KEP-4815 counters on these slices work).
    await create_pod(kube, ns, dra_pod("p-mig-full", n.mig, {"gpu": "mig-full"}))
    refused = await wait_for(
        kube,
        pod_path(ns),
        "p-mig-full",
        lambda p: any(
            c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
            for c in p.get("status", {}).get("conditions") or ()
        ),
        what="PodScheduled=False, Unschedulable",
    )
    assert not refused["spec"].get("nodeName")

    # This test's objects only: other tests leave claims behind in namespaces still being
    # deleted (a claim keeps its delete-protection finalizer until deallocated), whose
    # pools and classes are gone.
    found = [v for v in await audit(kube.get) if v.subject.startswith(f"{ns}/")]
    assert found == [], "\n".join(map(str, found))

    # A second claim whose status an admin writes by hand: the device of claim "one" again,
    # a device the pool does not have, and two results for a count of one.
    one = results(await allocated(kube, ns, "one"))[0]
    forged = await kube.post(
        claims_path(ns), claim("forged", [{"name": "gpu", "exactly": exactly(GPU_CLASS)}])
    )
    forged["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpu",
                        "driver": DRIVER,
                        "pool": n.singles,
                        "device": one["device"],
                    },
                    {"request": "gpu", "driver": DRIVER, "pool": n.singles, "device": "gpu-99"},
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [n.singles]}
                        ]
                    }
                ]
            },
        }
    }
    await kube.request("PUT", claims_path(ns, "forged") + "/status", body=forged)
    found = [
        v for v in await audit(kube.get) if v.subject.startswith(f"{ns}/") or n.singles in v.subject
    ]
    assert sorted((v.kind, v.subject) for v in found) == [
        ("double-allocation", f"{DRIVER}/{n.singles}/{one['device']}"),
        ("unknown-device", f"{ns}/forged"),
        ("wrong-count", f"{ns}/forged"),
    ], "\n".join(map(str, found))
    assert isinstance(found[0], Violation)
    assert f"{ns}/forged" in next(v.message for v in found if v.kind == "double-allocation")


async def test_slices_go_with_their_node_and_republishing_bumps_the_generation(
    kube: Kube,
) -> None:
    name = f"dra-{secrets.token_hex(3)}-gc"
    await create_nodes(kube, [_node(name)])
    publisher = Publisher(kube)
    try:
        first = await publisher.publish(DraNode(name, 2))
        second = await publisher.publish(DraNode(name, 4))
        live = await node_slices(kube, name)
        assert [s["metadata"]["name"] for s in live] == [second[0]["metadata"]["name"]]
        assert live[0]["spec"]["pool"]["generation"] == first[0]["spec"]["pool"]["generation"] + 1
        assert len(live[0]["spec"]["devices"]) == 4
        assert live[0]["metadata"]["ownerReferences"][0]["kind"] == "Node"
    finally:
        await kube.delete(f"/api/v1/nodes/{name}")
    for s in second:
        await wait_for_deletion(kube, SLICES, s["metadata"]["name"], timeout=60)
    assert await node_slices(kube, name) == []
