"""Next to the device plugin, gpusched's shared pods are invisible to kube-scheduler: the
daemon's over-commit detector (core/overcommit.py) says so on the Node. Real control plane,
kube-scheduler and a KWOK node of the test's own pool."""

from __future__ import annotations

import asyncio
import io
from contextlib import aclosing

import pytest

from gpusched.devcluster import LocalCluster
from gpusched.devcluster.demo import demo_pod
from gpusched.devcluster.testkit import wait_pod_scheduled
from gpusched.kube import JSON, Kube, pod_path, wait_for_deletion
from gpusched.model import keys
from tests.integration.daemon_support import (
    create_pods,
    node_pool,
    placement,
    pool_name,
    pool_node,
    pool_specs,
    running_daemon,
    until_bound,
)

pytestmark = pytest.mark.integration

A100_NODE = ((8, "A100M80", 96_000, 1_048_576, 8),)
POOL_HOST = "kubernetes.io/hostname"


async def _node_event(kube: Kube, node: str, reason: str) -> JSON:
    """The Event of `reason` on Node `node` (in "default", as for every cluster-scoped
    object), waiting for it by watching."""
    path = "/api/v1/namespaces/default/events"
    query = [("fieldSelector", f"involvedObject.name={node},reason={reason}")]

    async def find() -> JSON:
        while True:
            listing = await kube.get(path, query=query)
            if listing.get("items"):
                return dict(listing["items"][0])
            version = listing["metadata"]["resourceVersion"]
            events = kube.watch(path, resource_version=version, query=query)
            async with aclosing(events):
                async for event in events:
                    if event.type in ("ADDED", "MODIFIED"):
                        return event.object
                    if event.type == "ERROR":
                        break  # 410 Gone: list again

    return await asyncio.wait_for(find(), 60)


async def test_shared_pods_and_a_default_scheduler_pod_over_commit_the_node(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    (spec,) = pool_specs(pool, 1, shapes=A100_NODE)
    where = placement(pool)
    here = {"tolerations": where["tolerations"], "node_selector": {POOL_HOST: spec.name}}
    stream = io.StringIO()
    async with (
        node_pool(kube, [pool_node(spec, pool)]) as cards,
        running_daemon(cluster.kubeconfig, stream) as daemon,
    ):
        assert cards[spec.name] == 8
        # Six gpusched shared pods, 166 milli each: together one card, which the device
        # plugin does not count (they ask for no nvidia.com/gpu).
        shared = [f"shared-{i}" for i in range(6)]
        await create_pods(
            kube,
            namespace,
            [demo_pod(n, cpu="100m", annotations={keys.GPU_MILLI: "166"}, **here) for n in shared],
        )
        placed = await until_bound(kube, namespace, shared, len(shared))
        shared_cards = {int(p["metadata"]["annotations"][keys.GPU_IDS]) for p in placed.values()}
        assert len(shared_cards) == 1, shared_cards  # packed on one card
        assert spec.name not in daemon.overcommit.over

        # kube-scheduler sees 8 free nvidia.com/gpu and binds a pod asking for all of them.
        big = demo_pod("big", cpu="100m", gpus=8, scheduler_name=None, **here)
        await kube.post(pod_path(namespace), big)
        bound = await wait_pod_scheduled(kube, namespace, "big")
        assert bound["spec"]["nodeName"] == spec.name

        warning = await _node_event(kube, spec.name, "GPUOvercommitted")
        assert warning["type"] == "Warning"
        assert warning["reportingComponent"] == "gpusched"
        assert warning["involvedObject"]["kind"] == "Node"
        message = warning["message"]
        assert message.startswith("9 GPUs in use for 8 allocatable nvidia.com/gpu, 1 over")
        assert f"{namespace}/big (default-scheduler, 8)" in message
        assert "1 card(s) shared by 6 gpusched pod(s)" in message
        # The gauges were set in the tick that wrote the Event.
        registry = daemon.metrics.registry
        assert (
            registry.get_sample_value("gpusched_gpu_overcommitted_cards", {"node": spec.name}) == 1
        )
        others = [n for n in daemon.overcommit.over if n != spec.name]  # none when run alone
        assert registry.get_sample_value("gpusched_gpu_overcommitted_nodes") == 1 + len(others)

        # The default scheduler's pod goes: resolved, said once, the node's series removed.
        await kube.delete(pod_path(namespace, "big"))
        await wait_for_deletion(kube, pod_path(namespace), "big")
        resolved = await _node_event(kube, spec.name, "GPUOvercommitResolved")
        assert resolved["type"] == "Normal"
        assert resolved["message"].startswith("GPU over-commit resolved: 1 GPUs in use for 8")
        assert spec.name not in daemon.overcommit.over
        assert (
            registry.get_sample_value("gpusched_gpu_overcommitted_cards", {"node": spec.name})
            is None
        )
        others = [n for n in daemon.overcommit.over if n != spec.name]
        assert registry.get_sample_value("gpusched_gpu_overcommitted_nodes") == len(others)
    # Once per change: one Warning, no repeat while it lasted.
    warnings = [
        line
        for line in stream.getvalue().splitlines()
        if '"GPU over-commit"' in line and spec.name in line
    ]
    assert len(warnings) == 1, warnings
