"""kube-scheduler's PodTopologySpread, enforced by the daemon on the real control plane
(issue 11): a hard zone spread lands evenly, an unsatisfiable constraint is explained with
kube's FailedScheduling wording. Waits by watching, never by sleeping."""

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
    until_bound,
)

pytestmark = pytest.mark.integration

ONE_T4 = ((2, "T4", 32_000, 131_072, 0),)
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
SKEW = "node(s) didn't match pod topology spread constraints"
MISSING = SKEW + " (missing required label)"


def spread_pod(name: str, pool: str, *constraints: dict[str, Any]) -> JSON:
    pod = demo_pod(name, labels={"app": "spread"}, **placement(pool))
    pod["spec"]["topologySpreadConstraints"] = list(constraints)
    return pod


def hard(key: str, **extra: Any) -> dict[str, Any]:
    return {
        "maxSkew": 1,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "spread"}},
        **extra,
    }


def zoned_pool(pool: str) -> list[JSON]:
    nodes = [pool_node(s, pool) for s in pool_specs(pool, 3, shapes=ONE_T4)]
    for i, n in enumerate(nodes):
        n["metadata"]["labels"][ZONE] = f"{pool}-zone-{'abc'[i]}"
    return nodes


async def test_hard_zone_spread_lands_evenly_and_unsatisfiable_ones_say_why(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    nodes = zoned_pool(pool)
    zone_of = {n["metadata"]["name"]: n["metadata"]["labels"][ZONE] for n in nodes}
    names = [f"web-{i}" for i in range(6)]
    stream = io.StringIO()
    async with node_pool(kube, nodes), running_daemon(cluster.kubeconfig, stream):
        await create_pods(kube, namespace, [spread_pod(n, pool, hard(ZONE)) for n in names])
        bound = await until_bound(kube, namespace, names, 6)
        per_zone: dict[str, int] = {}
        for name in names:
            zone = zone_of[bound[name]["spec"]["nodeName"]]
            per_zone[zone] = per_zone.get(zone, 0) + 1
        assert sorted(per_zone.values()) == [2, 2, 2], per_zone

        # No node carries the key: every pool node is missing it (unresolvable).
        no_key = spread_pod("no-key", pool, hard("example.com/no-such-domain"))
        # 3 hostname domains < minDomains 4: the global minimum is 0, and each node's
        # 2 matching pods + the pod itself exceed maxSkew 1.
        skewed = spread_pod("skewed", pool, hard(HOSTNAME, minDomains=4))
        await create_pods(kube, namespace, [no_key, skewed])
        final = await wait_settled(kube, namespace, ["no-key", "skewed"])
        assert not final["no-key"]["spec"].get("nodeName")
        assert not final["skewed"]["spec"].get("nodeName")
        missing = (await events_for(kube, namespace, "no-key", "FailedScheduling"))[0]["message"]
        too_skewed = (await events_for(kube, namespace, "skewed", "FailedScheduling"))[0]["message"]
    # The session's other nodes fail the pool's node selector or taint first.
    assert missing.startswith("0/") and f"3 {MISSING}" in missing, missing
    assert f"3 {SKEW}" in too_skewed and "missing required label" not in too_skewed, too_skewed
