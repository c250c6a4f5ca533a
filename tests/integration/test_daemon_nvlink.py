"""NVLink islands and fabric cliques, through the daemon against the real control plane.

KWOK nodes publish a `gpusched.io/gpu-inventory` of two 4-card NVLink islands (and, for the
fabric test, GFD's `nvidia.com/gpu.clique`). Cards are taken beforehand by pods another
scheduler bound with `gpusched.io/gpu-ids` (the cache charges exactly those cards), so the
lowest free cards of a node span both islands. Every wait is on a watch.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import orjson
import pytest

from gpusched.devcluster import LocalCluster, NodeSpec
from gpusched.devcluster.demo import demo_pod
from gpusched.devcluster.testkit import wait_pod_scheduled
from gpusched.kube import JSON, Kube, pod_path
from gpusched.model import keys
from tests.integration.daemon_support import (
    binding_object,
    create_pods,
    node_pool,
    placement,
    pool_name,
    pool_node,
    running_daemon,
)

pytestmark = pytest.mark.integration

CLUSTER_UUID = "4a1f0c3e-9d2b-4c5a-8e7f-1b2c3d4e5f60"
# Nobody serves this schedulerName: the test binds these pods itself.
NOBODY = "nvlink-test-nobody"


def island_node(pool: str, name: str, labels: dict[str, str] | None = None) -> JSON:
    """An 8-card A100 node of the pool with two NVLink islands of four."""
    spec = NodeSpec(
        name=f"{pool}-{name}",
        gpus=8,
        model="A100M80",
        cpu_milli=96_000,
        memory_mib=1_048_576,
        rack=f"{pool}-rack",
        spine=f"{pool}-spine",
        nvlink_island_size=4,
    )
    node = pool_node(spec, pool)
    node["metadata"]["labels"].update(labels or {})
    return node


async def take_cards(
    kube: Kube, namespace: str, pool: str, node: str, cards: Sequence[int]
) -> None:
    """A pod bound to `node` by another scheduler, holding `cards` (its gpu-ids)."""
    name = f"busy-{node}"
    pod = demo_pod(name, gpus=len(cards), scheduler_name=NOBODY, **placement(pool))
    await kube.post(pod_path(namespace), pod)
    ids = ",".join(str(c) for c in cards)
    await kube.post(
        f"{pod_path(namespace, name)}/binding",
        binding_object(name, node, {keys.GPU_IDS: ids}),
    )
    bound = await wait_pod_scheduled(kube, namespace, name)
    assert bound["metadata"]["annotations"][keys.GPU_IDS] == ids


def decision_of(stream: io.StringIO, pod: str) -> JSON:
    for line in reversed(stream.getvalue().splitlines()):
        rec = orjson.loads(line)
        if rec.get("event") == "decision" and rec.get("pod", "").endswith(f"/{pod}"):
            assert isinstance(rec, dict)
            return rec
    raise AssertionError(f"no decision for {pod}")


async def test_cards_stay_in_one_island(cluster: LocalCluster, kube: Kube, namespace: str) -> None:
    pool = pool_name()
    # "a": cards 2, 3 busy: free 0, 1 | 4-7 (the lowest four, 0, 1, 4, 5, span islands).
    # "b": cards 0, 1, 4, 5 busy: free 2, 3 | 6, 7 (four cards, only across islands).
    # "c": cards 4-7 busy: island 0 whole.
    groups = {"a": {"req": "yes"}, "b": {"req": "yes", "pref": "yes"}, "c": {"pref": "yes"}}
    nodes = [
        island_node(pool, n, {f"{pool}/{g}": v for g, v in gs.items()}) for n, gs in groups.items()
    ]
    name = {n: f"{pool}-{n}" for n in groups}
    stream = io.StringIO()
    where = placement(pool)
    async with node_pool(kube, nodes), running_daemon(cluster.kubeconfig, stream):
        await take_cards(kube, namespace, pool, name["a"], (2, 3))
        await take_cards(kube, namespace, pool, name["b"], (0, 1, 4, 5))
        await take_cards(kube, namespace, pool, name["c"], (4, 5, 6, 7))

        def pod(pod_name: str, nvlink: str, group: str) -> JSON:
            return demo_pod(
                pod_name,
                gpus=4,
                annotations={keys.NVLINK: nvlink},
                tolerations=where["tolerations"],
                node_selector={**where["node_selector"], f"{pool}/{group}": "yes"},
            )

        # Required, on a or b: b has no island with four free cards; a's island 1 does.
        await create_pods(kube, namespace, [pod("required", "required", "req")])
        bound = await wait_pod_scheduled(kube, namespace, "required")
        # Preferred, on b or c: it fits one island only on c.
        await create_pods(kube, namespace, [pod("preferred", "preferred", "pref")])
        pref = await wait_pod_scheduled(kube, namespace, "preferred")

    assert bound["spec"]["nodeName"] == name["a"]
    assert bound["metadata"]["annotations"][keys.GPU_IDS] == "4,5,6,7"
    assert pref["spec"]["nodeName"] == name["c"]
    assert pref["metadata"]["annotations"][keys.GPU_IDS] == "0,1,2,3"
    top = {c["node"]: c["scores"] for c in decision_of(stream, "preferred")["top"]}
    assert top[name["c"]]["NVLinkTopology"]["raw"] == 100.0
    assert top[name["b"]]["NVLinkTopology"]["raw"] == 0.0  # spanning, under preferred


async def test_a_job_and_a_gang_stay_in_one_fabric_clique(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    # Two racks of three nodes; clique k holds node k of each rack, so a clique always
    # spans both racks while a rack alone could hold two 8-card pods.
    pool = pool_name()
    nodes = []
    clique_of: dict[str, str] = {}
    for r in range(2):
        for k in range(3):
            clique = f"{CLUSTER_UUID}.{k}"
            node = island_node(
                pool,
                f"r{r}-n{k}",
                {keys.GFD_CLIQUE: clique, keys.RACK_LABEL: f"{pool}-r{r}"},
            )
            nodes.append(node)
            clique_of[node["metadata"]["name"]] = clique
    stream = io.StringIO()
    where = placement(pool)
    async with node_pool(kube, nodes), running_daemon(cluster.kubeconfig, stream):
        job = {keys.JOB_ID_LABEL: "train"}
        await create_pods(kube, namespace, [demo_pod("job-0", gpus=8, labels=job, **where)])
        first = await wait_pod_scheduled(kube, namespace, "job-0")
        await create_pods(kube, namespace, [demo_pod("job-1", gpus=8, labels=job, **where)])
        second = await wait_pod_scheduled(kube, namespace, "job-1")
        gang = {keys.GANG_NAME: "g", keys.GANG_TOTAL: "2"}
        members = [demo_pod(f"g-{i}", gpus=8, annotations=gang, **where) for i in range(2)]
        await create_pods(kube, namespace, members)
        placed = [await wait_pod_scheduled(kube, namespace, f"g-{i}") for i in range(2)]

    job_nodes = {first["spec"]["nodeName"], second["spec"]["nodeName"]}
    assert len(job_nodes) == 2 and len({clique_of[n] for n in job_nodes}) == 1
    gang_nodes = {p["spec"]["nodeName"] for p in placed}
    assert len(gang_nodes) == 2 and len({clique_of[n] for n in gang_nodes}) == 1
    # Without cliques the gang would take the rack that still has two free nodes.
    assert len({n.split("-")[-2] for n in gang_nodes}) == 2
