"""gpusched allocates DRA ResourceClaims on the real control plane (issue 13's acceptance).

The daemon runs in-process as the shipped ServiceAccount (manifests/rbac/gpusched.yaml), so
every claim write it makes (finalizer, status.allocation, status.reservedFor) is one the
shipped ClusterRole allows; KWOK runs the pods; the NVIDIA-shaped ResourceSlices of
gpusched.devcluster.dra_fixtures play the driver. What gpusched wrote is judged twice: by
the independent audit over the API (gpusched.devcluster.dra_audit, no gpusched code) and
by the checks below of what kube's allocator requires of a claim it accepts.

* gpusched allocates 1 GPU, 2 GPUs on one PCIe root (matchAttribute) and shares of one
  GPU by capacity (the consumable-capacity variant of the slices), with its card choice:
  the 2-GPU pod fills the node kube-scheduler partly used rather than an empty one, the
  second share goes beside the first; kube-scheduler counts gpusched's shares.
* kube-scheduler and gpusched allocate on the same two nodes, demand above supply, each
  pod created once the one before it is decided: nothing over-allocated, exactly as many
  pods run as there are devices, the rest wait with FailedScheduling and get the devices
  freed by deleted pods. Created all at once, the same free device can go to two claims
  (a race neither scheduler can see); gpusched gives up what it wrote second, so what
  stays doubled was written last by kube-scheduler.
* A Job whose pod template names a ResourceClaimTemplate runs to completion.
* A claim naming a missing DeviceClass (kube's PreFilter message; the pod runs once the
  class exists) and one whose selector fails at run time give the pod a FailedScheduling
  Event saying so, and the daemon goes on scheduling.

Waits by watching, never sleeps. The nodes are private to each test (a fresh pool label and
taint) and carry no nvidia.com/gpu capacity: their cards come from their slices.
"""

from __future__ import annotations

import asyncio
import io
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import orjson
import pytest
import yaml

from gpusched.devcluster import LocalCluster, NodeSpec
from gpusched.devcluster.cluster import write_kubeconfig
from gpusched.devcluster.diffcheck import quantity
from gpusched.devcluster.dra_audit import audit
from gpusched.devcluster.dra_fixtures import (
    DEVICE_CLASSES,
    DRIVER,
    GPU_CLASS,
    PCIE_ROOT,
    RESOURCE_API,
    DraNode,
    Layout,
    Publisher,
    device_classes,
    node_slices,
)
from gpusched.devcluster.testkit import pod_manifest, wait_until_allowed, watch_items
from gpusched.kube import JSON, Kube, create_pod, pod_path, wait_for, wait_for_deletion
from gpusched.model import keys
from tests.integration.daemon_support import (
    POOL_KEY,
    RBAC,
    apply_docs,
    daemon_settings,
    node_pool,
    pool_name,
    pool_node,
    running_daemon,
    sa_token,
)
from tests.integration.test_dra_peer import claim, claims_path, exactly

pytestmark = pytest.mark.integration

FINALIZER = "resource.kubernetes.io/delete-protection"
TEMPLATES = f"{RESOURCE_API}/namespaces/{{namespace}}/resourceclaimtemplates"
SCHEDULERS = (keys.SCHEDULER_NAME, None)  # gpusched, the default scheduler
LATE_CLASS = "late-class.example.com"  # a DeviceClass created only after its pod waits


# -- the daemon as the shipped ServiceAccount --------------------------------------------------


async def shipped_identity(kube: Kube, cluster: LocalCluster, tmp_path: Path, ns: str) -> Path:
    """A kubeconfig of the shipped ServiceAccount, once its claim writes are allowed (the
    authorizer picks up a new binding a moment after the POST)."""
    docs = list(yaml.safe_load_all(RBAC.read_text()))
    await apply_docs(kube, docs)
    account = next(d["metadata"] for d in docs if d["kind"] == "ServiceAccount")
    user = f"system:serviceaccount:{account['namespace']}:{account['name']}"
    group = "resource.k8s.io"
    await wait_until_allowed(kube, user, "watch", "resourceslices", group=group)
    await wait_until_allowed(
        kube, user, "patch", "resourceclaims", subresource="status", namespace=ns, group=group
    )
    await wait_until_allowed(
        kube, user, "update", "resourceclaims", subresource="binding", namespace=ns, group=group
    )
    path = tmp_path / "gpusched.kubeconfig"
    token = await sa_token(kube, account["namespace"], account["name"])
    write_kubeconfig(path, cluster.server, cluster.ca_file, token, "gpusched")
    return path


@asynccontextmanager
async def gpusched(
    kube: Kube, cluster: LocalCluster, tmp_path: Path, ns: str
) -> AsyncIterator[io.StringIO]:
    """The daemon as the shipped identity; afterwards, its log shows no refused write and
    no exception."""
    kubeconfig = await shipped_identity(kube, cluster, tmp_path, ns)
    stream = io.StringIO()
    # The shipped Lease name: the shipped Role grants get/update on that one only.
    async with running_daemon(kubeconfig, stream, daemon_settings("gpusched")):
        yield stream
    records = [orjson.loads(line) for line in stream.getvalue().splitlines()]
    bad = [
        r
        for r in records
        if r.get("event") == "background write failed"
        or "forbidden" in str(r).lower()
        or "traceback" in str(r).lower()
    ]
    assert bad == [], bad


# -- nodes with slices -------------------------------------------------------------------------


@asynccontextmanager
async def dra_pool(
    kube: Kube, pool: str, nodes: Mapping[str, tuple[int, Layout]]
) -> AsyncIterator[dict[str, str]]:
    """Nodes `pool`-<role> labelled and tainted for `pool`, no device-plugin cards, each
    with its slices (GPUs, layout); yields role -> node name."""
    names = {role: f"{pool}-{role}" for role in nodes}
    objects = [
        pool_node(NodeSpec(names[r], 0, "", 64_000, 524_288, f"{pool}-rack", f"{pool}-spine"), pool)
        for r in nodes
    ]
    async with node_pool(kube, objects):
        publisher = Publisher(kube)
        await publisher.install_classes()
        for role, (gpus, layout) in nodes.items():
            await publisher.publish(DraNode(names[role], gpus), layout)
        yield names


def dra_pod(
    name: str,
    pool: str,
    claims: Mapping[str, str],
    *,
    scheduler: str | None = keys.SCHEDULER_NAME,
    templates: Mapping[str, str] | None = None,
    node: str = "",
) -> JSON:
    """A pod of `scheduler` in `pool` (on `node` when given, by hostname) using `claims`
    (pod claim name -> ResourceClaim) and `templates` (pod claim name -> template)."""
    pod = pod_manifest(name, scheduler_name=scheduler)
    spec = pod["spec"]
    spec["nodeSelector"] = {POOL_KEY: pool, **({"kubernetes.io/hostname": node} if node else {})}
    spec["tolerations"] = [{"key": POOL_KEY, "operator": "Equal", "value": pool}]
    refs = [{"name": k, "resourceClaimName": v} for k, v in claims.items()]
    refs += [{"name": k, "resourceClaimTemplateName": v} for k, v in (templates or {}).items()]
    spec["resourceClaims"] = refs
    spec["containers"][0]["resources"]["claims"] = [{"name": r["name"]} for r in refs]
    return pod


def one_gpu_template(name: str = "one-gpu") -> JSON:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly(GPU_CLASS)}]}}
        },
    }


# -- reading back --------------------------------------------------------------------------------


def phase(pod: JSON) -> str:
    return str(pod.get("status", {}).get("phase", ""))


def unschedulable(pod: JSON) -> bool:
    return any(
        c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in pod.get("status", {}).get("conditions") or ()
    )


async def running(kube: Kube, ns: str, name: str) -> JSON:
    return await wait_for(
        kube, pod_path(ns), name, lambda p: phase(p) == "Running", what=f"pod {name} Running"
    )


def results(claim_obj: JSON) -> list[JSON]:
    found: list[JSON] = claim_obj["status"]["allocation"]["devices"]["results"]
    return found


async def pod_claims(kube: Kube, ns: str, pod: JSON) -> list[JSON]:
    """The pod's claims, template claims by the name in status.resourceClaimStatuses."""
    by_ref = {
        s["name"]: s.get("resourceClaimName")
        for s in pod["status"].get("resourceClaimStatuses") or ()
    }
    out = []
    for ref in pod["spec"]["resourceClaims"]:
        name = ref.get("resourceClaimName") or by_ref.get(ref["name"])
        assert name, f"{pod['metadata']['name']}: no claim for {ref}"
        out.append(await kube.get(claims_path(ns, name)))
    return out


async def current_devices(kube: Kube, node: str) -> dict[str, JSON]:
    """The devices of the node's pool at its newest generation, by name."""
    slices = await node_slices(kube, node)
    newest = max(s["spec"]["pool"]["generation"] for s in slices)
    return {
        d["name"]: d
        for s in slices
        if s["spec"]["pool"]["generation"] == newest
        for d in s["spec"].get("devices") or ()
    }


async def assert_kube_would_accept(
    kube: Kube, ns: str, pod: JSON, counts: Sequence[int]
) -> list[JSON]:
    """What kube's allocator and the kubelet require of the running pod's claims (one
    result per counted device): results naming devices of the current generation of the
    pod's node's pool, the right count, reserved for the pod, the finalizer that protects
    an allocation, a node selector selecting exactly the pod's node. Returns the results."""
    node = pod["spec"]["nodeName"]
    devices = await current_devices(kube, node)
    found = []
    for claim_obj, count in zip(await pod_claims(kube, ns, pod), counts, strict=True):
        where = claim_obj["metadata"]["name"]
        got = results(claim_obj)
        assert len(got) == count, (where, got)
        for r in got:
            assert (r["driver"], r["pool"]) == (DRIVER, node), (where, r)
            assert r["device"] in devices, (where, r, sorted(devices))
        assert len({r["device"] for r in got}) == count or count == 1, (where, got)
        status = claim_obj["status"]
        assert [c["uid"] for c in status["reservedFor"]] == [pod["metadata"]["uid"]], status
        assert status["reservedFor"][0]["resource"] == "pods", status
        assert FINALIZER in claim_obj["metadata"].get("finalizers", ()), claim_obj["metadata"]
        assert status["allocation"]["nodeSelector"] == {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        }, status["allocation"]
        found.append(got)
    return [r for got in found for r in got]


async def assert_audit_clean(kube: Kube, pool: str) -> None:
    violations = [v for v in await audit(kube.get) if pool in v.subject or pool in v.message]
    assert violations == [], "\n".join(map(str, violations))


# -- 1. gpusched allocates, with its card choice -------------------------------------------------


async def test_gpusched_allocates_one_two_and_a_share_of_a_gpu(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    pool, shared_pool = pool_name(), pool_name()
    pcie = {"matchAttribute": PCIE_ROOT}
    for body in (
        claim("kube-two", [{"name": "gpus", "exactly": exactly(GPU_CLASS, 2)}], [pcie]),
        claim("one", [{"name": "gpu", "exactly": exactly(GPU_CLASS)}]),
        claim("pair", [{"name": "gpus", "exactly": exactly(GPU_CLASS, 2)}], [pcie]),
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
            for i in (1, 2, 3)
        ),
    ):
        await kube.post(claims_path(ns), body)
    async with (
        dra_pool(kube, pool, {"empty": (4, "standard"), "part": (4, "standard")}) as nodes,
        dra_pool(kube, shared_pool, {"shared": (2, "shared")}) as shared,
        gpusched(kube, cluster, tmp_path, ns),
    ):
        # The default scheduler takes two cards of "part" (one PCIe root): gpusched learns
        # of them from the claim's status only.
        await create_pod(
            kube,
            ns,
            dra_pod("kube-two", pool, {"gpus": "kube-two"}, scheduler=None, node=nodes["part"]),
        )
        kube_two = await running(kube, ns, "kube-two")
        kube_devices = {
            r["device"] for r in await assert_kube_would_accept(kube, ns, kube_two, [2])
        }

        # Two GPUs on one PCIe root: GPUFragmentation's packing term prefers the node whose
        # intact cards the pod takes all of, so the pair fills "part" rather than opening
        # "empty"; the allocator gives it the two cards kube-scheduler left, one root.
        await create_pod(kube, ns, dra_pod("pair", pool, {"gpus": "pair"}))
        pair = await running(kube, ns, "pair")
        pair_results = await assert_kube_would_accept(kube, ns, pair, [2])
        assert pair["spec"]["nodeName"] == nodes["part"]
        devices = await current_devices(kube, nodes["part"])
        assert {r["device"] for r in pair_results} == set(devices) - kube_devices
        roots = {devices[r["device"]]["attributes"][PCIE_ROOT]["string"] for r in pair_results}
        assert len(roots) == 1, pair_results
        assert [r["request"] for r in pair_results] == ["gpus", "gpus"]

        # One GPU: "part" is full, in the API's view, whoever allocated its cards.
        await create_pod(kube, ns, dra_pod("one", pool, {"gpu": "one"}))
        one = await running(kube, ns, "one")
        await assert_kube_would_accept(kube, ns, one, [1])
        assert one["spec"]["nodeName"] == nodes["empty"]

        # Two 30Gi shares: GPUFragmentation's card choice packs the second beside the
        # first (the tightest card) rather than opening the node's other GPU.
        shares = []
        for i in (1, 2):
            await create_pod(kube, ns, dra_pod(f"share-{i}", shared_pool, {"gpu": f"share-{i}"}))
            pod = await running(kube, ns, f"share-{i}")
            assert pod["spec"]["nodeName"] == shared["shared"]
            shares += await assert_kube_would_accept(kube, ns, pod, [1])
        assert shares[0]["device"] == shares[1]["device"], shares
        assert shares[0]["shareID"] != shares[1]["shareID"]
        # consumedCapacity keyed as the slice spells the capacity ("memory", unqualified),
        # as kube's allocator writes it and as drivers and kube-scheduler look it up.
        assert [{k: quantity(v) for k, v in r["consumedCapacity"].items()} for r in shares] == [
            {"memory": 30 * 2**30}
        ] * 2

        # kube-scheduler reads gpusched's shares from the claims: a third 30Gi share does
        # not fit in what is left of their card (80Gi - 60Gi), so kube's allocator, which
        # tries the devices in order, must give it the other GPU.
        await create_pod(
            kube,
            ns,
            dra_pod(
                "kube-share", shared_pool, {"gpu": "share-3"}, scheduler=None, node=shared["shared"]
            ),
        )
        (third,) = await assert_kube_would_accept(
            kube, ns, await running(kube, ns, "kube-share"), [1]
        )
        assert third["device"] != shares[0]["device"], (third, shares)

        await assert_audit_clean(kube, pool)
        await assert_audit_clean(kube, shared_pool)


# -- 2. kube-scheduler and gpusched on the same devices ------------------------------------------


async def failed_scheduling(kube: Kube, ns: str, name: str) -> JSON:
    """The first FailedScheduling Event of pod `name` (list, then watch)."""
    found = await watch_items(
        kube,
        f"/api/v1/namespaces/{ns}/events",
        bool,
        query=[("fieldSelector", f"involvedObject.name={name},reason=FailedScheduling")],
        timeout=60,
        what=f"a FailedScheduling Event of {name}",
    )
    return next(iter(found.values()))


def settled(pods: Mapping[str, JSON], names: Sequence[str], run: int) -> bool:
    """`run` of the pods Running, every other one refused (PodScheduled=False,
    Unschedulable) and not bound."""
    got = [pods.get(n, {}) for n in names]
    return sum(phase(p) == "Running" for p in got) == run and all(
        phase(p) == "Running" or (unschedulable(p) and not p["spec"].get("nodeName")) for p in got
    )


async def wait_settled(kube: Kube, ns: str, names: Sequence[str], run: int) -> dict[str, JSON]:
    def explain(items: dict[str, JSON]) -> str:
        return "; ".join(
            f"{n}: {phase(p)} on {p['spec'].get('nodeName')!r}"
            for n in names
            if (p := items.get(f"{ns}/{n}", {})) or True
            if p
        )

    found = await watch_items(
        kube,
        pod_path(ns),
        lambda items: settled({k.split("/")[1]: v for k, v in items.items()}, names, run),
        timeout=60,
        what=f"{run} of {len(names)} pods Running, the rest refused",
        explain=explain,
    )
    return {k.split("/")[1]: v for k, v in found.items()}


def interleaved(pool: str, count: int) -> list[JSON]:
    """`count` 1-GPU pods, each with a claim from the "one-gpu" template, alternating
    gpusched ("gs-<i>") and the default scheduler ("ks-<i>")."""
    return [
        dra_pod(
            f"{'gs' if i % 2 == 0 else 'ks'}-{i}",
            pool,
            {},
            scheduler=SCHEDULERS[i % 2],
            templates={"gpu": "one-gpu"},
        )
        for i in range(count)
    ]


def decided(pod: JSON) -> bool:
    return phase(pod) == "Running" or (unschedulable(pod) and not pod["spec"].get("nodeName"))


async def test_both_schedulers_share_the_devices_without_over_allocating(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    """Eight pods alternating schedulers for 2 nodes x 2 GPUs, each created once the one
    before it is decided (running or refused): each scheduler must see the other's
    allocations in the API. (At the very same moment they cannot: the next test.)"""
    ns = namespace
    pool = pool_name()
    await kube.post(TEMPLATES.format(namespace=ns), one_gpu_template())
    pods_in = interleaved(pool, 8)
    names = [p["metadata"]["name"] for p in pods_in]
    devices = 4
    async with (
        dra_pool(kube, pool, {"a": (2, "standard"), "b": (2, "standard")}),
        gpusched(kube, cluster, tmp_path, ns),
    ):
        for pod in pods_in:
            await create_pod(kube, ns, pod)
            name = pod["metadata"]["name"]
            await wait_for(kube, pod_path(ns), name, decided, what=f"{name} running or refused")
        pods = await wait_settled(kube, ns, names, devices)
        run = [n for n in names if phase(pods[n]) == "Running"]
        # Both schedulers placed pods on the shared devices, and both refused some.
        assert {n[:2] for n in run} == {"gs", "ks"}, run
        assert {n[:2] for n in names if n not in run} == {"gs", "ks"}, run
        for n in run:
            await assert_kube_would_accept(kube, ns, pods[n], [1])
        await assert_audit_clean(kube, pool)
        for n in names:
            if n not in run:
                event = await failed_scheduling(kube, ns, n)
                assert event["type"] == "Warning", event
                assert event["message"].startswith("0/"), event["message"]

        # Free one device of each scheduler: the resourceclaim controller deletes the
        # claims it made from the template for the deleted pods, and two waiting pods
        # take the devices.
        freed = [next(n for n in run if n.startswith(k)) for k in ("gs", "ks")]
        claims = {
            n: pods[n]["status"]["resourceClaimStatuses"][0]["resourceClaimName"] for n in freed
        }
        for n in freed:
            await kube.delete(pod_path(ns, n))
        for n in freed:
            await wait_for_deletion(kube, pod_path(ns), n)
            await wait_for_deletion(kube, claims_path(ns), claims[n])
        rest = [n for n in names if n not in freed]
        pods = await wait_settled(kube, ns, rest, devices)
        now_running = [n for n in rest if phase(pods[n]) == "Running"]
        assert len(set(now_running) - set(run)) == 2, (run, now_running)
        for n in now_running:
            await assert_kube_would_accept(kube, ns, pods[n], [1])
        await assert_audit_clean(kube, pool)


async def test_both_schedulers_at_the_same_moment(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    """The same eight pods created all at once. Neither scheduler can see what the other
    decides within its watch latency, and the API checks no device across claims, so the
    same free device can go to two claims. gpusched's part: once its write shows in the
    watch it checks it against every other claim (PreBind) and gives up a device another
    claim got first, so every device that ends up doubled was last written by
    kube-scheduler, which never re-checks. (Measured on this machine: 0-2 of the 4 devices
    doubled per run; before that check, 2-4. Some of those doubles are kube-scheduler
    against itself: its allocated-device set is not reference-counted, so when gpusched
    gives up a device both held, kube-scheduler forgets its own claim still has it.)"""
    ns = namespace
    pool = pool_name()
    await kube.post(TEMPLATES.format(namespace=ns), one_gpu_template())
    pods_in = interleaved(pool, 8)
    names = [p["metadata"]["name"] for p in pods_in]
    async with (
        dra_pool(kube, pool, {"a": (2, "standard"), "b": (2, "standard")}),
        gpusched(kube, cluster, tmp_path, ns),
    ):
        await asyncio.gather(*(create_pod(kube, ns, p) for p in pods_in))
        found = await watch_items(
            kube,
            pod_path(ns),
            lambda items: all(decided(items.get(f"{ns}/{n}", {"spec": {}})) for n in names),
            timeout=60,
            what="every pod running or refused",
        )
        running_pods = [n for n in names if phase(found[f"{ns}/{n}"]) == "Running"]
        assert len(running_pods) >= 4, running_pods
        listing = await kube.get(claims_path(ns))
        claims = {f"{ns}/{c['metadata']['name']}": c for c in listing["items"]}
        violations = [v for v in await audit(kube.get) if pool in v.subject or pool in v.message]
        assert [v for v in violations if v.kind != "double-allocation"] == [], violations
        extra = 0
        for v in violations:
            holders = [claims[k] for k in v.message.split(" to ", 1)[1].split(", ")]
            extra += len(holders) - 1
            # The allocation written last (claims are written in one order by etcd).
            last = max(holders, key=lambda c: int(c["metadata"]["resourceVersion"]))
            owner = last["metadata"]["ownerReferences"][0]["name"]
            assert owner.startswith("ks-"), (v, [c["metadata"] for c in holders])
        # Doubled devices aside, each running pod has a device of its own.
        assert len(running_pods) == 4 + extra, (running_pods, violations)


# -- 3. a Job's ResourceClaimTemplate ------------------------------------------------------------


async def test_a_job_with_a_claim_template_runs_to_completion(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    pool = pool_name()
    await kube.post(TEMPLATES.format(namespace=ns), one_gpu_template())
    template = dra_pod("unused", pool, {}, templates={"gpu": "one-gpu"})
    template["spec"]["restartPolicy"] = "Never"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "trainer"},
        "spec": {
            "parallelism": 2,
            "completions": 3,
            "template": {"metadata": {"labels": {"app": "trainer"}}, "spec": template["spec"]},
        },
    }
    # KWOK completes a Job's pods as soon as they run and the resourceclaim controller then
    # deletes their claims: record each claim while it is allocated and reserved, from a
    # watch started before the Job.
    seen: dict[str, JSON] = {}

    def record(items: dict[str, JSON]) -> bool:
        for key, c in items.items():
            owners = c["metadata"].get("ownerReferences") or ()
            if any(o["kind"] == "Pod" and o["name"].startswith("trainer-") for o in owners) and (
                c.get("status", {}).get("reservedFor")
            ):
                seen[key] = c
        return len(seen) >= 3

    async with (
        dra_pool(kube, pool, {"a": (2, "standard")}) as nodes,
        gpusched(kube, cluster, tmp_path, ns),
    ):
        watcher = asyncio.create_task(
            watch_items(kube, claims_path(ns), record, timeout=60, what="the Job's claims in use")
        )
        await kube.post(f"/apis/batch/v1/namespaces/{ns}/jobs", job)
        done = await wait_for(
            kube,
            f"/apis/batch/v1/namespaces/{ns}/jobs",
            "trainer",
            lambda j: j.get("status", {}).get("succeeded") == 3,
            what="Job trainer succeeded 3 times",
        )
        await watcher
    assert done["status"].get("failed", 0) == 0, done["status"]
    for c in seen.values():
        (r,) = results(c)
        assert (r["driver"], r["pool"]) == (DRIVER, nodes["a"]), r
        assert r["device"] in ("gpu-0", "gpu-1")
        assert FINALIZER in c["metadata"]["finalizers"]
        assert c["status"]["reservedFor"][0]["name"].startswith("trainer-")


# -- 4. bad input ---------------------------------------------------------------------------------


async def test_a_missing_class_and_a_failing_selector_are_reported_not_fatal(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    ns = namespace
    pool = pool_name()
    # Admission compiles selectors but cannot know attributes: an attribute no device has
    # is a CEL runtime error, which fails the allocation (kube's allocator does the same).
    missing = {"cel": {"expression": f"device.attributes['{DRIVER}'].noSuchAttribute == 'x'"}}
    for body in (
        claim("no-class", [{"name": "gpu", "exactly": exactly(LATE_CLASS)}]),
        claim("bad-cel", [{"name": "gpu", "exactly": exactly(GPU_CLASS, selectors=[missing])}]),
        claim("good", [{"name": "gpu", "exactly": exactly(GPU_CLASS)}]),
    ):
        await kube.post(claims_path(ns), body)
    async with (
        dra_pool(kube, pool, {"a": (2, "standard")}) as nodes,
        gpusched(kube, cluster, tmp_path, ns) as log,
    ):
        await create_pod(kube, ns, dra_pod("no-class", pool, {"gpu": "no-class"}))
        await create_pod(kube, ns, dra_pod("bad-cel", pool, {"gpu": "bad-cel"}))
        no_class = await failed_scheduling(kube, ns, "no-class")
        assert no_class["type"] == "Warning"
        # kube-scheduler's PreFilter wording, as v1.36.3 reports it for its own pods.
        # (Every node of the session's cluster counts: other tests' pools are there too.)
        assert re.fullmatch(
            rf"0/\d+ nodes are available: request gpu: device class {re.escape(LATE_CLASS)}"
            r" does not exist\..*",
            no_class["message"],
        ), no_class["message"]
        bad_cel = await failed_scheduling(kube, ns, "bad-cel")
        assert "CEL runtime error" in bad_cel["message"], bad_cel["message"]
        assert "noSuchAttribute" in bad_cel["message"], bad_cel["message"]
        # The daemon goes on: a good pod after the bad ones is allocated and runs.
        await create_pod(kube, ns, dra_pod("good", pool, {"gpu": "good"}))
        good = await running(kube, ns, "good")
        assert good["spec"]["nodeName"] == nodes["a"]
        await assert_kube_would_accept(kube, ns, good, [1])
        for name in ("no-class", "bad-cel"):
            pod = await kube.get(pod_path(ns, name))
            assert not pod["spec"].get("nodeName")
            leftover = await kube.get(claims_path(ns, name))
            assert not leftover.get("status", {}).get("allocation"), leftover["status"]
        assert LATE_CLASS in log.getvalue()

        # The class appears (a copy of the GPU class): the waiting pod is woken by the
        # DeviceClass event and allocated.
        gpu = next(c for c in device_classes() if c["metadata"]["name"] == GPU_CLASS)
        late = {**gpu, "metadata": {"name": LATE_CLASS}}
        late["spec"] = {"selectors": gpu["spec"]["selectors"]}
        await kube.post(DEVICE_CLASSES, late)
        try:
            woken = await running(kube, ns, "no-class")
            await assert_kube_would_accept(kube, ns, woken, [1])
        finally:
            await kube.delete(f"{DEVICE_CLASSES}/{LATE_CLASS}")
