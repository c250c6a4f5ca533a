"""The differential workload generator: deterministic, the feature mix a parameter, and
every feasible pod proven placeable (the integration test's zero tolerance rests on it)."""

from __future__ import annotations

import copy

import pytest

from gpusched.devcluster import differential as diff
from gpusched.devcluster.diffcheck import Outcome, check, pod_key


@pytest.mark.parametrize("features", [diff.ENFORCED, diff.FEATURES], ids=["enforced", "all"])
@pytest.mark.parametrize("seed", [1, 11, 23])
def test_every_feasible_pod_is_proven_to_fit(seed: int, features: frozenset[str]) -> None:
    w = diff.generate(seed, features)
    assert diff.unproven(w) == []
    assert len(w.pods) >= 200
    assert w.impossible and w.gated <= {pod_key(p) for p in w.pods}


def test_same_seed_same_workload_and_features_select_pods() -> None:
    assert diff.generate(5) == diff.generate(5)
    assert [pod_key(p) for p in diff.generate(5).pods] != [
        pod_key(p) for p in diff.generate(6).pods
    ]
    few = diff.generate(5, {"resources"})
    kinds = {p["metadata"]["labels"][diff.KIND] for p in few.pods}
    assert kinds == {
        "plain",
        "gpu",
        "gpu4",
        "scratch",
        "rdma",
        "hugepages",
        "gpu16",
        "cpu1000",
        "fpga",
        "scratch10t",
    }
    every = diff.generate(5, diff.FEATURES)
    assert every.volumes and every.claims and every.anchors
    assert any("podAntiAffinity" in (p["spec"].get("affinity") or {}) for p in every.pods)
    assert any(p["spec"].get("topologySpreadConstraints") for p in every.pods)
    with pytest.raises(ValueError, match="unknown features"):
        diff.generate(5, {"preemption"})


def test_the_proof_notices_a_pod_that_may_not_fit() -> None:
    w = diff.generate(1, {"resources"})
    hog = next(p for p in w.pods if p["metadata"]["labels"][diff.KIND] == "gpu4")
    # Four 4-card pods more: the eight-card nodes could all be half full before it comes.
    for i in range(40):
        extra = copy.deepcopy(hog)
        extra["metadata"]["name"] = f"more-{i}"
        w.pods.append(extra)
    assert any("gpu4" in u or "more-" in u for u in diff.unproven(w))


def test_for_scheduler_sets_only_the_scheduler_name() -> None:
    w = diff.generate(2)
    pods = w.for_scheduler("ai-scheduler")
    assert {p["spec"]["schedulerName"] for p in pods} == {"ai-scheduler"}
    assert "schedulerName" not in w.pods[0]["spec"]
    assert [pod_key(p) for p in pods] == [pod_key(p) for p in w.pods]


def test_a_placement_the_generator_forbids_is_caught_by_the_checker() -> None:
    """Bind each pod to a node it rules out: the checker must object to every one."""
    w = diff.generate(3, diff.FEATURES)
    nodes = {n["metadata"]["name"]: n for n in w.nodes}
    cordoned = diff.node_name(diff.CORDONED_NODE)
    dedicated = diff.node_name(diff.DEDICATED_NODES[0])
    cases = {
        "zone": ("diff-01", "node affinity excludes"),  # selects one zone; diff-01 is b
        "dedicated": ("diff-00", "node affinity excludes"),
        "plain": (cordoned, "unschedulable"),
        "gpu": (dedicated, "does not tolerate"),
        "zonal-data": (None, "outside the node affinity of its volume"),
    }
    for kind, (target, words) in cases.items():
        where = target
        p = copy.deepcopy(next(p for p in w.pods if p["metadata"]["labels"][diff.KIND] == kind))
        if where is None:  # a node outside the volume's zone
            claim = p["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
            pv = next(v for v in w.volumes if v["spec"]["claimRef"]["name"] == claim)
            zone = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0][
                "matchExpressions"
            ][0]["values"][0]
            where = next(
                n
                for n, o in nodes.items()
                if o["metadata"]["labels"][diff.ZONE] != zone
                and n != cordoned
                and n not in {diff.node_name(i) for i in diff.DEDICATED_NODES}
            )
        if kind == "zone" and p["spec"]["nodeSelector"][diff.ZONE] == "zone-b":
            where = "diff-00"
        p["spec"]["nodeName"] = where
        bound_claims = {
            f"{c['metadata']['namespace']}/{c['metadata']['name']}": c for c in w.claims
        }
        volumes = {v["metadata"]["name"]: v for v in w.volumes}
        found = check(Outcome(nodes=w.nodes, pods=[p], claims=bound_claims, volumes=volumes))
        assert any(words in v for v in found), (kind, found)
