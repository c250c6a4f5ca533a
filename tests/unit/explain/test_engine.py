"""The explain engine on in-memory facts: each binding constraint named, each change found
and verified by the real plugins (the default profile)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from gpusched.explain import Explainer, NodeReadings, World
from gpusched.framework.snapshot import TELEMETRY_CARD_COLUMNS
from gpusched.framework.tenancy import StaticTenancy, TenantQuota
from gpusched.model import keys, quota
from tests.unit.explain.support import REGISTRY, facts, node, pod


def explain(nodes: list[Any], pods: list[Any], target: Any, **kw: Any) -> dict[str, Any]:
    return Explainer(facts(nodes, [*pods, target], **kw), REGISTRY).explain(target).to_json()


def test_resources_names_the_lowest_priority_pod_whose_leaving_makes_room() -> None:
    nodes = [node("a"), node("b")]
    pods = [
        pod("big-a", 6, node_name="a", cards="0,1,2,3,4,5", priority=50),
        pod("small-a", 2, node_name="a", cards="6,7", priority=10),
        pod("high-b", 6, node_name="b", cards="0,1,2,3,4,5", priority=100),
        pod("low-b", 2, node_name="b", cards="6,7", priority=1),
    ]
    r = explain(nodes, pods, pod("want", 2))
    assert r["state"] == "pending" and r["stage"] == "Filter"
    assert r["binding"] == "resources"
    assert r["groups"] == [
        {
            "plugin": "GPUFit",
            "reason": "Insufficient nvidia.com/gpu",
            "kind": "resources",
            "nodes": 2,
        }
    ]
    change = r["changes"][0]
    # One victim either way; the lowest priority of the single pods that suffice: low-b.
    assert change["action"] == {"node": "b", "delete": ["team/low-b"]}
    assert change["text"] == "fits on node b if pod team/low-b (2 GPUs, priority 1) left"


def test_fragmentation_when_the_free_cards_are_spread() -> None:
    nodes = [node("a"), node("b")]
    pods = [
        pod("a1", 6, node_name="a", cards="0,1,2,3,4,5"),
        pod("b1", 4, node_name="b", cards="0,1,2,3", priority=3),
        pod("b2", 2, node_name="b", cards="4,5"),
    ]
    r = explain(nodes, pods, pod("want", 4))
    assert r["binding"] == "fragmentation"
    assert "4 whole cards are free in total" in r["detail"]
    assert r["changes"][0]["action"] == {"node": "b", "delete": ["team/b2"]}


def test_thermal_finds_the_lowest_red_line_that_admits_a_node() -> None:
    nodes = [node("hot")]
    temp = np.full(8, 80.0, np.float32)
    cards = tuple(
        temp if c == "card_temp" else np.full(8, np.nan, np.float32) for c in TELEMETRY_CARD_COLUMNS
    )
    readings = {"hot": NodeReadings(cards, np.full(8, 999.0), 80.0, 999.0, np.zeros(8, np.bool_))}
    r = explain(nodes, [], pod("want", 4), readings=readings)
    assert r["binding"] == "thermal"
    # 80 °C now, +40 °C x 4/8 cards with the pod: projected 100 °C; the line must be above.
    change = r["changes"][0]
    assert change["action"] == {"redLineCelsius": 101, "node": "hot"}
    assert change["text"].startswith("fits if the red line were 101 °C")


def test_topology_nvlink_required_without_an_island() -> None:
    nodes = [node("flat", gpus=8, island=0)]
    want = pod("want", 2, annotations={keys.NVLINK: "required"})
    r = explain(nodes, [], want)
    assert r["binding"] == "topology"
    assert r["changes"][0]["action"] == {"annotations": {keys.NVLINK: "preferred"}, "node": "flat"}


def test_affinity_names_the_node_selector_term() -> None:
    nodes = [node("a")]
    want = replace(pod("want", 1), node_selector={"zone": "z1"})
    r = explain(nodes, [], want)
    assert r["binding"] == "affinity"
    assert r["changes"][0]["action"] == {"remove": "nodeSelector.zone", "node": "a"}


def test_quota_raise_or_a_tenant_pod_leaving() -> None:
    nodes = [node("a")]
    limits = list(quota.UNLIMITED)
    limits[quota.INDEX[quota.GPU]] = 2000
    tenancy = StaticTenancy([TenantQuota("team", "team/q", max=tuple(limits))])
    pods = [pod("mine", 2, node_name="a", cards="0,1", priority=0)]
    r = explain(nodes, pods, pod("want", 2), tenancy=tenancy)
    assert r["binding"] == "quota" and r["stage"] == "PreFilter"
    texts = [c["text"] for c in r["changes"]]
    assert r["changes"][0]["action"] == {"quota": "team/q", "max": {quota.GPU: "4"}}
    assert "allowed 2 GPUs more" in texts[0]
    assert r["changes"][1]["action"] == {"delete": ["team/mine"]}


def test_gang_short_of_members_needs_them_created() -> None:
    nodes = [node("a")]
    ann = {keys.GANG_NAME: "g", keys.GANG_TOTAL: "3"}
    members = [pod(f"m{i}", 1, annotations=ann) for i in range(2)]
    r = explain(nodes, members[1:], members[0])
    assert r["binding"] == "gang" and r["stage"] == "PreEnqueue"
    change = r["changes"][0]
    assert change["action"] == {"gang": "team/g", "create": 1}
    assert "has 2 of its minimum 3 pods" in change["text"]


def test_a_pod_that_fits_says_so() -> None:
    r = explain([node("a")], [], pod("want", 1))
    assert r["state"] == "fits" and r["feasible"] == ["a"] and r["changes"] == []


def test_two_victims_when_no_single_pod_makes_room() -> None:
    nodes = [node("a")]
    pods = [
        pod("p1", 2, node_name="a", cards="0,1"),
        pod("p2", 2, node_name="a", cards="2,3"),
        pod("keep", 2, node_name="a", cards="4,5", priority=5),
    ]
    r = explain(nodes, pods, pod("want", 6))
    assert r["binding"] == "resources"
    (change,) = r["changes"]
    assert change["action"] == {"node": "a", "delete": ["team/p1", "team/p2"]}
    assert change["text"] == (
        "fits on node a if pod team/p1 (2 GPUs, priority 0), pod team/p2 (2 GPUs, priority 0) left"
    )


def test_a_placed_pods_anti_affinity_names_that_pod() -> None:
    term = {
        "labelSelector": {"matchLabels": {"app": "web"}},
        "topologyKey": "kubernetes.io/hostname",
    }
    loner = replace(
        pod("loner", 1, node_name="a", cards="0"),
        affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
    )
    want = pod("want", 1, labels={"app": "web"})
    r = explain([node("a")], [loner], want)
    assert r["binding"] == "affinity", r
    (change,) = r["changes"]
    assert change["action"] == {"node": "a", "delete": ["team/loner"]}


def test_the_copy_puts_probed_pods_back_exactly() -> None:
    pods = [pod("p1", 2, node_name="a", cards="0,1"), pod("p2", 1, node_name="a", cards="5")]
    world = World(facts([node("a")], pods), REGISTRY)
    snap = world.cache.snapshot
    before = snap.card_free_milli.copy()
    with world.without(pods):
        assert (snap.card_free_milli[0, :8] == 1000).all()
    assert (snap.card_free_milli == before).all()
    assert {p.key for p in world.cache.pods_on_node("a")} == {"team/p1", "team/p2"}


def test_a_complete_gang_that_does_not_fit_names_the_pods_to_leave() -> None:
    ann = {keys.GANG_NAME: "g", keys.GANG_TOTAL: "2"}
    members = [pod(f"m{i}", 4, annotations=ann) for i in range(2)]
    pods = [
        pod("a1", 6, node_name="a", cards="0,1,2,3,4,5", priority=9),
        pod("b1", 2, node_name="b", cards="0,1"),
        pod("b2", 4, node_name="b", cards="2,3,4,5", priority=9),
    ]
    r = explain([node("a"), node("b")], [*pods, members[1]], members[0])
    assert r["binding"] == "gang" and r["stage"] == "PreFilter", r
    (change,) = r["changes"]
    # Two members of 4 cards, 2 free on each node: no node holds one. One pod leaving is
    # enough only if it frees 8 cards on one node (a1: a holds both members); b1 and b2
    # together would be two pods.
    assert change["action"] == {"gang": "team/g", "delete": ["team/a1"]}
    assert change["text"] == "gang team/g fits if pod team/a1 (6 GPUs, priority 9) left"
