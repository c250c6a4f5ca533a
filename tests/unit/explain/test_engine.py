"""The explain engine on in-memory facts: each binding constraint named, each change found
and verified by the real plugins (the default profile)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from gpusched.explain import Explainer, NodeReadings, World, plugin_states
from gpusched.explain import attempt as dry
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
    assert "4 whole cards the pod could use are free in total (a: 2, b: 2)" in r["detail"]
    assert r["changes"][0]["action"] == {"node": "b", "delete": ["team/b2"]}


def test_the_binding_constraint_is_named_on_the_nodes_the_pod_asked_for() -> None:
    # Many nodes outside the pod's selection would take it "but for affinity"; the one node
    # it selected is full: the constraint that binds there is room, not the selector.
    nodes = [node("mine"), *(node(f"other-{i}") for i in range(5))]
    pods = [pod("full", 8, node_name="mine", cards="0,1,2,3,4,5,6,7", priority=1)]
    want = pod("want", 2, node_selector={"kubernetes.io/hostname": "mine"})
    r = explain(nodes, pods, want)
    assert r["binding"] == "resources", r
    assert r["changes"][0]["action"] == {"node": "mine", "delete": ["team/full"]}
    # With no node passing the selector, the selector binds.
    lost = pod("lost", 2, node_selector={"kubernetes.io/hostname": "nowhere"})
    assert explain(nodes, pods, lost)["binding"] == "affinity"


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


def test_fragmentation_counts_only_cards_the_pod_could_take() -> None:
    """2 free 80 GB cards on a, 2 free 32 GB cards on v: a pod of 4 cards of 40 GB each
    could use only a's; 2 in total is not fragmentation (GPUFit's own eligibility rule)."""
    nodes = [node("a"), node("v", model="V100M32")]
    pods = [
        pod("a1", 6, node_name="a", cards="0,1,2,3,4,5"),
        pod("v1", 6, node_name="v", cards="0,1,2,3,4,5"),
    ]
    want = pod("want", 4, annotations={keys.GPU_MEMORY_MIB: "40000"})
    r = explain(nodes, pods, want)
    assert r["binding"] == "resources", r
    assert "fragmentation" not in r["detail"]
    # The same cluster for a pod that fits on 32 GB cards: 4 usable cards in total, 2 on
    # each node.
    r = explain(nodes, pods, pod("want", 4))
    assert r["binding"] == "fragmentation"
    assert "4 whole cards the pod could use are free in total" in r["detail"]


def test_a_model_mismatch_is_not_resources() -> None:
    nodes = [node("a"), node("t", model="T4")]
    pods = [pod("a1", 7, node_name="a", cards="0,1,2,3,4,5,6")]
    want = pod("want", 2, annotations={keys.GPU_MODEL: "A100M80"})
    r = explain(nodes, pods, want)
    kinds = {g["reason"]: g["kind"] for g in r["groups"]}
    assert kinds == {
        "Insufficient nvidia.com/gpu": "resources",
        "node(s) had no GPU of model A100M80": "gpu model",
    }


def test_a_filter_that_raises_is_named_at_filter() -> None:
    """A Filter plugin that raises stops the dry cycle at Filter (not PreFilter), named."""
    target = pod("want", 1)
    ex = Explainer(facts([node("a")], [target]), REGISTRY)
    thermal = ex.world.frameworks[target.scheduler_name].plugins["Thermal"]

    def broken(*_: Any) -> Any:
        raise RuntimeError("sensor table corrupt")

    thermal.filter = broken
    r = ex.explain(target).to_json()
    assert (r["state"], r["stage"]) == ("pending", "Filter")
    assert r["binding"] == "thermal"
    assert r["detail"].startswith("Filter Thermal: Thermal Filter raised RuntimeError")
    assert r["message"] == r["detail"].removeprefix("Filter Thermal: ")


def test_the_search_stops_at_its_deadline_and_says_so() -> None:
    nodes = [node("a")]
    pods = [
        pod("p1", 4, node_name="a", cards="0,1,2,3"),
        pod("p2", 4, node_name="a", cards="4,5,6,7"),
    ]
    target = pod("want", 2)
    f = facts(nodes, [*pods, target])
    whole = Explainer(f, REGISTRY).explain(target).to_json()
    assert whole["complete"] and whole["changes"], whole
    # The same search whose time is up before its first trial: the binding constraint is
    # still named, no change is claimed, and the answer says it was cut short.
    cut = Explainer(f, REGISTRY, deadline=5.0, clock=lambda: 5.0).explain(target).to_json()
    assert cut["binding"] == whole["binding"] == "resources"
    assert not cut["complete"] and cut["changes"] == [] and cut["trials"] == 0
    assert any("cut short at its time limit" in n for n in cut["notes"]), cut["notes"]
    stopped = Explainer(f, REGISTRY, stop=lambda: True).explain(target).to_json()
    assert not stopped["complete"] and "the search was cancelled" in stopped["notes"]


# -- the plugins' history (StatefulPlugin) ------------------------------------------------


def _readings(temps: dict[str, float]) -> dict[str, NodeReadings]:
    out = {}
    for name, t in temps.items():
        temp = np.full(8, t, np.float32)
        cards = tuple(
            temp if c == "card_temp" else np.full(8, np.nan, np.float32)
            for c in TELEMETRY_CARD_COLUMNS
        )
        out[name] = NodeReadings(cards, np.full(8, 999.0), t, 999.0, np.zeros(8, np.bool_))
    return out


def test_a_node_latched_by_thermal_is_named_not_fits() -> None:
    """The scheduler saw 85 °C, now 80 °C: still latched (release below 77 °C), so it
    refuses a small GPU pod whose projection (80.5 °C) is under the line. The copy is built
    with new plugin instances: it must carry the latch, or it would answer "fits"."""
    nodes = [node("warm")]
    small = pod("small", 0, annotations={keys.GPU_MILLI: "100"})  # +0.5 °C projected
    live = World(facts(nodes, [small], readings=_readings({"warm": 85.0})), REGISTRY)
    live._copy_readings(_readings({"warm": 80.0}))
    for fw in live.frameworks.values():
        fw.telemetry_updated()
    assert not dry.run(live, small).fits  # the scheduler refuses it

    now = facts(nodes, [small], readings=_readings({"warm": 80.0}))
    assert Explainer(now, REGISTRY).explain(small).state == "fits"  # without the history

    carried = replace(now, plugin_states=plugin_states(live.frameworks))
    assert carried.plugin_states[(small.scheduler_name, "Thermal")].state == frozenset({"warm"})
    r = Explainer(carried, REGISTRY).explain(small).to_json()
    assert (r["state"], r["binding"]) == ("pending", "thermal"), r
    assert r["groups"][0]["reason"] == (
        "node(s) cooling after reaching the thermal red line (below 77 °C required)"
    )
    # A red line changed by the counterfactual is a new plugin (as a reload builds one):
    # the latch is not carried into it, so the change found is verified without it.
    (change,) = r["changes"]
    assert change["action"] == {"redLineCelsius": 83, "node": "warm"}


def test_nodes_reserved_for_a_starving_gang_are_named_not_fits() -> None:
    """A gang of two 8-card pods, refused for capacity longer than starvationSeconds,
    reserves both nodes in the scheduler; a 2-card pod then fits there by room but the
    scheduler refuses it. The copy must carry the reservation."""
    ann = {keys.GANG_NAME: "g", keys.GANG_TOTAL: "2"}
    members = [pod(f"m{i}", 8, annotations=ann) for i in range(2)]
    bound = [
        pod("x", 4, node_name="a", cards="0,1,2,3"),
        pod("y", 4, node_name="b", cards="0,1,2,3"),
    ]
    want = pod("want", 2)
    f = facts([node("a"), node("b")], [*bound, *members, want])
    live = World(f, REGISTRY)
    gang = live.frameworks[want.scheduler_name].plugins["GangScheduling"]
    gang.refused_since["team/g"] = f.now - gang.args.starvation_seconds  # starving since
    assert not dry.run(live, members[0]).fits
    assert gang.reservation is not None and gang.reservation.key == "team/g"
    assert not dry.run(live, want).fits  # the scheduler refuses the small pod

    assert Explainer(f, REGISTRY).explain(want).state == "fits"  # without the history

    carried = replace(f, plugin_states=plugin_states(live.frameworks))
    state = carried.plugin_states[(want.scheduler_name, "GangScheduling")].state
    assert state.reservation[:2] == ("team/g", ("a", "b"))  # type: ignore[attr-defined]
    r = Explainer(carried, REGISTRY).explain(want).to_json()
    assert (r["state"], r["binding"]) == ("pending", "gang"), r
    assert r["groups"] == [
        {
            "plugin": "GangScheduling",
            "reason": "node(s) were reserved for a gang waiting longer",
            "kind": "gang",
            "nodes": 2,
        }
    ]
