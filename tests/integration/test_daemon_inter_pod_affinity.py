"""kube-scheduler's InterPodAffinity, enforced by the daemon on the real control plane
(issue 11): required anti-affinity spreads replicas, required affinity co-locates, an
unmet anti-affinity is reported in kube's words, an existing pod's anti-affinity repels.
Waits by watching, never by sleeping."""

from __future__ import annotations

import io
from typing import Any

import pytest

from gpusched.devcluster import LocalCluster
from gpusched.devcluster.demo import demo_pod, wait_settled
from gpusched.kube import JSON, Kube
from tests.integration.daemon_support import (
    create_pods,
    events_for,
    node_pool,
    placement,
    pool_name,
    pool_node,
    pool_specs,
    running_daemon,
)

pytestmark = pytest.mark.integration

HOST = "kubernetes.io/hostname"
ONE_T4 = ((2, "T4", 32_000, 131_072, 0),)


def _term(labels: dict[str, str]) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": HOST}


def _pod(name: str, pool: str, labels: dict[str, str], affinity: dict[str, Any]) -> JSON:
    pod = demo_pod(name, labels=labels, **placement(pool))
    pod["spec"]["affinity"] = affinity
    return pod


def _anti(labels: dict[str, str]) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term(labels)]}}


def _on(pod: JSON, host: str) -> JSON:
    pod["spec"]["nodeSelector"][HOST] = host
    return pod


async def test_pod_affinity_and_anti_affinity(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    nodes = [pool_node(s, pool) for s in pool_specs(pool, 3, shapes=ONE_T4)]
    hosts = [n["metadata"]["labels"][HOST] for n in nodes]
    web = {"app": "web"}
    replicas = [_pod(f"web-{i}", pool, {**web, "replica": str(i)}, _anti(web)) for i in range(3)]
    stream = io.StringIO()
    async with node_pool(kube, nodes), running_daemon(cluster.kubeconfig, stream):
        # Required anti-affinity: three replicas on three distinct nodes.
        await create_pods(kube, namespace, replicas)
        placed = await wait_settled(kube, namespace, [p["metadata"]["name"] for p in replicas])
        where = {n: p["spec"].get("nodeName") for n, p in placed.items()}
        assert sorted(where.values()) == sorted(hosts), where

        # Required affinity: a pod that must share a node with replica 1 lands there.
        buddy = _pod(
            "buddy",
            pool,
            {"app": "buddy"},
            {
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [_term({"replica": "1"})]
                }
            },
        )
        # A fourth replica: every node already holds one, so its anti-affinity cannot be met.
        fourth = _pod("web-3", pool, {**web, "replica": "3"}, _anti(web))
        # An existing pod's anti-affinity: "quiet" on the first node repels "noisy" pods.
        quiet = _on(_pod("quiet", pool, {"app": "quiet"}, _anti({"role": "noisy"})), hosts[0])
        await create_pods(kube, namespace, [buddy, fourth, quiet])
        got = await wait_settled(kube, namespace, ["buddy", "web-3", "quiet"])
        assert got["buddy"]["spec"]["nodeName"] == where["web-1"]
        assert got["quiet"]["spec"]["nodeName"] == hosts[0]
        assert not got["web-3"]["spec"].get("nodeName")
        (event,) = await events_for(kube, namespace, "web-3", "FailedScheduling")
        # The session's other nodes fail the pool's node selector first, so only ours count.
        assert "3 node(s) didn't match pod anti-affinity rules" in event["message"]

        pinned = _on(_pod("noisy-pinned", pool, {"role": "noisy"}, {}), hosts[0])
        free = _pod("noisy-free", pool, {"role": "noisy"}, {})
        await create_pods(kube, namespace, [pinned, free])
        noisy = await wait_settled(kube, namespace, ["noisy-pinned", "noisy-free"])
        assert not noisy["noisy-pinned"]["spec"].get("nodeName")
        assert noisy["noisy-free"]["spec"]["nodeName"] in hosts[1:]
        (event,) = await events_for(kube, namespace, "noisy-pinned", "FailedScheduling")
        assert "1 node(s) didn't satisfy existing pods anti-affinity rules" in event["message"]
