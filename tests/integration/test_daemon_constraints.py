"""kube-scheduler's SchedulingGates and NodePorts, enforced by the daemon on the real control
plane (issue 11). Waits by watching, never by sleeping."""

from __future__ import annotations

import io

import orjson
import pytest

from gpusched.devcluster import LocalCluster
from gpusched.devcluster.demo import demo_pod, wait_settled
from gpusched.devcluster.testkit import wait_pod_scheduled
from gpusched.kube import JSON, Kube, pod_path
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


def _scheduled_condition(pod: JSON) -> JSON:
    for c in pod.get("status", {}).get("conditions") or ():
        if c.get("type") == "PodScheduled":
            return dict(c)
    return {}


async def test_gated_pod_waits_until_its_last_gate_is_removed(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    nodes = [pool_node(s, pool) for s in pool_specs(pool, 1, shapes=ONE_T4)]
    stream = io.StringIO()
    where = placement(pool)
    async with node_pool(kube, nodes), running_daemon(cluster.kubeconfig, stream) as daemon:
        gated = demo_pod("gated", gpus=1, **where)
        gated["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
        await kube.post(pod_path(namespace), gated)
        # The watch delivers pods in order: once this later pod is bound, the daemon has
        # seen the gated one and kept it out of the queue.
        await create_pods(kube, namespace, [demo_pod("after", gpus=1, **where)])
        await until_bound(kube, namespace, ["after"], 1)
        held = await kube.get(pod_path(namespace, "gated"))
        assert not held["spec"].get("nodeName")
        assert _scheduled_condition(held)["reason"] == "SchedulingGated"
        assert daemon.queue.where(held["metadata"]["uid"]) == "gated"
        records = [orjson.loads(line) for line in stream.getvalue().splitlines()]
        gated_records = [
            r for r in records if r.get("event") == "decision" and r.get("result") == "gated"
        ]
        assert gated_records[0]["message"] == "waiting for scheduling gates: [example.com/hold]"

        await kube.merge_patch(pod_path(namespace, "gated"), {"spec": {"schedulingGates": []}})
        bound = await wait_pod_scheduled(kube, namespace, "gated")
        assert bound["spec"]["nodeName"] == nodes[0]["metadata"]["name"]


async def test_two_pods_with_one_host_port_on_one_node(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    nodes = [pool_node(s, pool) for s in pool_specs(pool, 1, shapes=ONE_T4)]
    stream = io.StringIO()
    pods = []
    for name in ("web-a", "web-b"):
        p = demo_pod(name, **placement(pool))
        p["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
        pods.append(p)
    async with node_pool(kube, nodes), running_daemon(cluster.kubeconfig, stream):
        await create_pods(kube, namespace, pods)
        final = await wait_settled(kube, namespace, ["web-a", "web-b"])
    bound = [n for n, p in final.items() if p["spec"].get("nodeName")]
    assert len(bound) == 1
    (waiting,) = {"web-a", "web-b"} - set(bound)
    assert _scheduled_condition(final[waiting])["reason"] == "Unschedulable"
    events = await events_for(kube, namespace, waiting, "FailedScheduling")
    # The session's other nodes fail the pool's node selector first, so only ours counts.
    assert "1 node(s) didn't have free ports for the requested pod ports" in events[0]["message"]
