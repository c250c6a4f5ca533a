"""The daemon in-process against the session's real control plane with KWOK nodes.

Each test brings its own pool of nodes (labelled and tainted, so the session fleet and
the other tests do not interfere) and waits by watching, never by sleeping.
"""

from __future__ import annotations

import asyncio
import io

import orjson
import pytest

from gpusched.devcluster import LocalCluster
from gpusched.devcluster.demo import (
    card_usage,
    cards_of,
    demo_pod,
    mixed_workload,
    settled,
    wait_settled,
)
from gpusched.devcluster.testkit import wait_pod_scheduled
from gpusched.kube import JSON, Kube, pod_path, wait_for_deletion
from gpusched.model import keys
from tests.integration.daemon_support import (
    create_pods,
    events_for,
    first_event,
    node_pool,
    placement,
    pool_name,
    pool_node,
    pool_specs,
    running_daemon,
    until_bound,
)
from tests.integration.fault_support import assert_invariants, pod_watch

pytestmark = pytest.mark.integration


def _decisions(stream: io.StringIO) -> list[JSON]:
    out = []
    for line in stream.getvalue().splitlines():
        rec = orjson.loads(line)  # every line is JSON: the log is machine-readable
        if rec.get("event") == "decision":
            out.append(rec)
    return out


async def test_200_mixed_pods_on_50_gpu_nodes(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    nodes = [pool_node(s, pool) for s in pool_specs(pool, 50)]
    stream = io.StringIO()
    async with node_pool(kube, nodes) as cards, running_daemon(cluster.kubeconfig, stream):
        pods = mixed_workload(200, seed=11, **placement(pool))
        await create_pods(kube, namespace, pods)
        final = await wait_settled(
            kube, namespace, [p["metadata"]["name"] for p in pods], timeout=120
        )

    impossible = {n: p for n, p in final.items() if n.startswith("impossible")}
    fitting = {n: p for n, p in final.items() if n not in impossible}
    unbound = sorted(n for n, p in fitting.items() if not p["spec"].get("nodeName"))
    assert not unbound, f"pods that fit were left pending: {unbound}"
    assert len(impossible) == 5
    assert all(not p["spec"].get("nodeName") for p in impossible.values())
    # No card over-allocated, recomputed from the API objects.
    assert card_usage(final.values(), cards) == []
    # CPU-only pods hold no card; GPU pods carry the cards they were given.
    for name, pod in fitting.items():
        held, _ = cards_of(pod)
        assert bool(held) == (not name.startswith("cpu")), name

    # The pods that cannot fit say why, in kube-scheduler's words.
    expected = {
        "Insufficient nvidia.com/gpu": 1,
        "GPU of model H100": 1,
        "Insufficient GPU share": 1,
        "Insufficient cpu": 1,
        "annotation gpusched.io/gpu-milli='half' is not an integer": 1,
    }
    messages = []
    for name, pod in impossible.items():
        evs = await events_for(kube, namespace, name, "FailedScheduling")
        assert evs, f"{name} has no FailedScheduling Event"
        assert evs[0]["type"] == "Warning"
        assert evs[0]["reportingComponent"] == "gpusched"
        message = evs[0]["message"]
        assert message.startswith("0/"), message
        assert "nodes are available: " in message
        cond = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
        assert cond["status"] == "False" and cond["reason"] == "Unschedulable"
        assert cond["message"] == message
        messages.append(message)
    for fragment in expected:
        assert any(fragment in m for m in messages), (fragment, messages)

    # Every bound pod's decision is in the JSON log, with its scores and cards.
    records = {r["uid"]: r for r in _decisions(stream) if r["result"] == "bound"}
    for name, pod in fitting.items():
        rec = records.get(pod["metadata"]["uid"])
        assert rec is not None, f"no decision record for {name}"
        assert rec["pod"] == f"{namespace}/{name}"
        assert rec["node"] == pod["spec"]["nodeName"]
        assert rec["cards"] == cards_of(pod)[0]
        assert rec["top"] and rec["top"][0]["total"] >= rec["top"][-1]["total"]
        assert len(rec["top"]) <= 5
        chosen = next(t for t in rec["top"] if t["node"] == rec["node"])
        assert {"raw", "normalized", "weight"} <= set(chosen["scores"]["GPUFragmentation"])
        assert {"PreFilter", "Filter", "Score", "Binding"} <= set(rec["us"])
        assert rec["feasible"] >= 1
        if name.startswith("shared"):
            assert rec["milli"] == [int(pod["metadata"]["annotations"][keys.GPU_MILLI])]
    # The Scheduled Event carries the top plugin scores after kube-scheduler's sentence,
    # and the record explains the choice (gpusched/observability/explain_record.py).
    names = sorted(fitting)
    picks = [next(n for n in names if n.startswith(kind)) for kind in ("shared", "cpu")]
    picks.append(next(n for n in names if cards_of(fitting[n])[0] and n not in picks))
    for name in picks:
        rec = records[fitting[name]["metadata"]["uid"]]
        message = (await first_event(kube, namespace, name, "Scheduled"))["message"]
        assert message.startswith(f"Successfully assigned {namespace}/{name} to {rec['node']} (")
        assert len(message.encode()) <= 1024
        total = next(t["total"] for t in rec["top"] if t["node"] == rec["node"])
        best, value = next(iter(rec["chosen_scores"].items()))
        assert f"score {total:.1f}: {best} {value:.1f}" in message, (message, rec)
        # KWOK nodes report no temperature: said, not shown as Thermal's neutral 50.
        assert rec["chosen_scores"]["Thermal"] == "no data" and "Thermal no data" in message
        assert rec["score_units"]["GPUFragmentation"] == "points (0-100)"
        assert rec["tie"]["tied"] >= 1 and rec["tie"]["text"]
        if rec["cards"]:
            assert f"cards {','.join(map(str, rec['cards']))}" in message
            assert rec["cards_reason"], rec
        else:
            assert "cards_reason" not in rec
    # Filter rejections are counted by reason in the unschedulable pods' records.
    rejected = [r for r in _decisions(stream) if r["result"] == "unschedulable"]
    assert any(r["rejections"].get("Insufficient nvidia.com/gpu") for r in rejected)


async def test_default_scheduler_pods_are_left_alone_and_counted(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    specs = pool_specs(pool, 2, shapes=((8, "A100M80", 96_000, 1_048_576, 8),))
    nodes = [pool_node(s, pool) for s in specs]
    # A node whose inventory annotation is broken: used through the GFD fallback and
    # reported once with a Warning Event naming the annotation.
    nodes[1]["metadata"]["annotations"][keys.GPU_INVENTORY] = "not json"
    stream = io.StringIO()
    where = placement(pool)
    async with node_pool(kube, nodes), running_daemon(cluster.kubeconfig, stream):
        first = specs[0].name
        theirs = demo_pod(
            "theirs",
            gpus=8,
            scheduler_name=None,
            tolerations=where["tolerations"],
            node_selector={"kubernetes.io/hostname": first},
        )
        await kube.post(pod_path(namespace), theirs)
        bound = await wait_pod_scheduled(kube, namespace, "theirs")
        assert bound["spec"]["nodeName"] == first
        # Ours must not get the cards the default scheduler's pod holds.
        await create_pods(
            kube,
            namespace,
            [
                demo_pod(
                    "ours-pinned",
                    gpus=1,
                    tolerations=where["tolerations"],
                    node_selector={"kubernetes.io/hostname": first},
                ),
                demo_pod("ours-free", gpus=8, **where),
            ],
        )
        final = await wait_settled(kube, namespace, ["ours-pinned", "ours-free"])
        node_events = await events_for(kube, "default", specs[1].name, "GPUInventory")

    assert not final["ours-pinned"]["spec"].get("nodeName")
    ev = await events_for(kube, namespace, "ours-pinned", "FailedScheduling")
    assert "Insufficient nvidia.com/gpu" in ev[0]["message"]
    assert final["ours-free"]["spec"]["nodeName"] == specs[1].name
    # Left alone: no annotation, no Event from us.
    theirs_now = await kube.get(pod_path(namespace, "theirs"))
    assert keys.GPU_IDS not in (theirs_now["metadata"].get("annotations") or {})
    assert not [
        e
        for e in await events_for(kube, namespace, "theirs", "FailedScheduling")
        if e.get("reportingComponent") == "gpusched"
    ]
    assert node_events and keys.GPU_INVENTORY in node_events[0]["message"]
    assert node_events[0]["type"] == "Warning"


async def test_gpu_model_names_and_nvlink_on_inventory_and_gfd_only_nodes(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    """Either name of a model (the trace's short name, GFD's product name) matches on a
    node with an inventory and on a GFD-only one; a model no node has is refused with the
    models there; an NVLink-required pod on the GFD-only node is told the layout is
    unknown."""
    pool = pool_name()
    specs = pool_specs(pool, 2, shapes=((8, "A100M80", 96_000, 1_048_576, 8),))
    nodes = [pool_node(s, pool) for s in specs]
    # The dev cluster's inventory names the cards "A100M80"; GFD's label says
    # "NVIDIA-A100-SXM4-80GB". The second node keeps only the labels.
    del nodes[1]["metadata"]["annotations"][keys.GPU_INVENTORY]
    inv, gfd = specs[0].name, specs[1].name
    where = placement(pool)

    def on(node: str, name: str, gpus: int, **ann: str) -> JSON:
        selector = {**where["node_selector"], "kubernetes.io/hostname": node}
        return demo_pod(
            name,
            gpus=gpus,
            annotations=ann,
            tolerations=where["tolerations"],
            node_selector=selector,
        )

    pods = [
        on(inv, "product-on-inventory", 4, **{keys.GPU_MODEL: "NVIDIA-A100-SXM4-80GB"}),
        on(gfd, "short-on-gfd", 4, **{keys.GPU_MODEL: "A100M80"}),
        on(gfd, "nvlink-on-gfd", 4, **{keys.NVLINK: "required"}),
        demo_pod("missing", gpus=1, annotations={keys.GPU_MODEL: "H100"}, **where),
    ]
    stream = io.StringIO()
    async with node_pool(kube, nodes), running_daemon(cluster.kubeconfig, stream):
        await create_pods(kube, namespace, pods)
        final = await wait_settled(kube, namespace, [p["metadata"]["name"] for p in pods])
        nvlink = await events_for(kube, namespace, "nvlink-on-gfd", "FailedScheduling")
        missing = await events_for(kube, namespace, "missing", "FailedScheduling")

    assert final["product-on-inventory"]["spec"].get("nodeName") == inv
    assert final["short-on-gfd"]["spec"].get("nodeName") == gfd
    assert not final["nvlink-on-gfd"]["spec"].get("nodeName")
    assert nvlink and "1 node(s) had NVLink layout unknown" in nvlink[0]["message"]
    assert "no NVLink island" not in nvlink[0]["message"]
    assert not final["missing"]["spec"].get("nodeName")
    message = missing[0]["message"]
    assert "no node has a GPU of model H100" in message
    assert "A100M80 (NVIDIA-A100-SXM4-80GB)" in message, message


async def test_pod_deleted_while_being_bound_leaks_nothing(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    spec = pool_specs(pool, 1)[0]
    stream = io.StringIO()
    where = placement(pool)
    async with (
        pod_watch(kube, namespace) as watch,
        node_pool(kube, [pool_node(spec, pool)]),
        running_daemon(cluster.kubeconfig, stream) as daemon,
    ):
        # Hold the binding cycle at Bind until the pod is gone.
        entered, release = asyncio.Event(), asyncio.Event()
        bind = daemon.writer.bind

        async def gated(pod, node, annotations=None):  # type: ignore[no-untyped-def]
            entered.set()
            await release.wait()
            return await bind(pod, node, annotations)

        daemon.writer.bind = gated  # type: ignore[method-assign]
        created = await kube.post(pod_path(namespace), demo_pod("doomed", gpus=8, **where))
        uid = created["metadata"]["uid"]
        await asyncio.wait_for(entered.wait(), 30)
        assert daemon.cache.is_assumed(uid)
        await kube.delete(pod_path(namespace, "doomed"), query=[("gracePeriodSeconds", "0")])
        await wait_for_deletion(kube, pod_path(namespace), "doomed")
        daemon.writer.bind = bind  # type: ignore[method-assign]
        release.set()
        # The node's 8 cards are free again: the next 8-card pod gets them.
        await kube.post(pod_path(namespace), demo_pod("next", gpus=8, **where))
        nxt = await wait_pod_scheduled(kube, namespace, "next")
        assert nxt["spec"]["nodeName"] == spec.name
        assert uid not in daemon.cache.pods
        assert daemon.queue.where(uid) == ""
        assert daemon.cache.stats.over_allocated == 0
        # Issue 10's fault matrix (item 3): every invariant holds, recomputed from the API.
        await assert_invariants(kube, namespace, [spec.name], watch, ["next"])
    records = [r for r in _decisions(stream) if r["uid"] == uid]
    assert records and records[-1]["result"] == "dropped"
    assert "no longer exists" in records[-1]["message"]


async def test_node_deleted_under_pending_pods(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    small = ((2, "T4", 32_000, 131_072, 0),)
    first, second = (pool_node(s, pool) for s in pool_specs(pool, 2, shapes=small))
    stream = io.StringIO()
    where = placement(pool)
    async with node_pool(kube, [first]), running_daemon(cluster.kubeconfig, stream) as daemon:
        names = ["a", "b", "c"]
        await create_pods(kube, namespace, [demo_pod(n, gpus=2, **where) for n in names])
        state = await wait_settled(kube, namespace, names)
        assert sum(bool(p["spec"].get("nodeName")) for p in state.values()) == 1
        await kube.delete(f"/api/v1/nodes/{first['metadata']['name']}")
        await wait_for_deletion(kube, "/api/v1/nodes", first["metadata"]["name"])
        async with node_pool(kube, [second]):
            # A new node is a cluster event: one pending pod moves there at once.
            state = await until_bound(kube, namespace, names, 2)
            on_second = [
                n
                for n, p in state.items()
                if p["spec"].get("nodeName") == second["metadata"]["name"]
            ]
            assert len(on_second) == 1
            assert daemon.cache.stats.over_allocated == 0
            # The watch delivers events in order: the second node's arrival, which bound a
            # pod, came after the first node's deletion.
            assert daemon.cache.snapshot.row_of(first["metadata"]["name"]) < 0


async def test_sigterm_finishes_bindings_in_flight(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    spec = pool_specs(pool, 1)[0]
    stream = io.StringIO()
    where = placement(pool)
    async with node_pool(kube, [pool_node(spec, pool)]):
        async with running_daemon(cluster.kubeconfig, stream) as daemon:
            entered, release = asyncio.Event(), asyncio.Event()
            bind = daemon.writer.bind

            async def gated(pod, node, annotations=None):  # type: ignore[no-untyped-def]
                entered.set()
                await release.wait()
                return await bind(pod, node, annotations)

            daemon.writer.bind = gated  # type: ignore[method-assign]
            await kube.post(pod_path(namespace), demo_pod("inflight", gpus=1, **where))
            await asyncio.wait_for(entered.wait(), 30)
            daemon.stop()  # stop taking pods...
            await kube.post(pod_path(namespace), demo_pod("late", gpus=1, **where))
            release.set()  # ...but the binding in flight completes
        pod = await kube.get(pod_path(namespace, "inflight"))
        assert pod["spec"]["nodeName"] == spec.name
        # The card came with the Binding, in the same write as the node.
        assert pod["metadata"]["annotations"][keys.GPU_IDS] in {str(c) for c in range(8)}
        late = await kube.get(pod_path(namespace, "late"))
        assert not late["spec"].get("nodeName")
        assert not settled(late)
