"""InterPodAffinity Score: kube-scheduler's scoring_test.go cases (TestPreferredAffinity,
TestPreferredAffinityWithHardPodAffinitySymmetricWeight), PreScore's skips and the
min-max normalisation."""

from __future__ import annotations

from gpusched.plugins.inter_pod_affinity import InterPodAffinityArgs
from tests.unit.plugins.inter_pod_affinity.support import (
    REGION,
    Cluster,
    affinity,
    apod,
    expr,
    lnode,
    sel,
    term,
    weighted,
)

AZ = "az"
S1 = {"security": "S1"}
S2 = {"security": "S2"}
STAY_WITH_S1 = affinity(preferred=[weighted(5, term(sel(expr("security", "In", "S1")), REGION))])
AWAY_FROM_S1_IN_AZ = affinity(
    anti_preferred=[weighted(5, term(sel(expr("security", "In", "S1")), AZ))]
)
HARD_S1 = affinity([term(sel(expr("security", "In", "S1", "value2")), REGION)])


def china_india_az() -> list:
    return [
        lnode("node1", **{REGION: "China"}),
        lnode("node2", **{REGION: "India"}),
        lnode("node3", **{AZ: "az1"}),
    ]


def test_no_pods_no_score_skip() -> None:
    c = Cluster(china_india_az())
    assert c.scores(apod("in", {}, STAY_WITH_S1)) is None
    # No terms anywhere: PreScore skips without counting (the FGD traces' case).
    assert c.scores(apod("in", S1)) is None


def test_affinity_scores_the_domain_holding_matching_pods() -> None:
    c = Cluster(
        china_india_az(),
        [apod("p1", S1, node="node1"), apod("p2", S2, node="node2"), apod("p3", S1, node="node3")],
    )
    assert c.scores(apod("in", S1, STAY_WITH_S1)) == {"node1": 100, "node2": 0, "node3": 0}


def test_every_node_of_the_domain_scores_alike() -> None:
    c = Cluster(
        [
            lnode("node1", **{REGION: "China"}),
            lnode("node2", **{REGION: "China", AZ: "az1"}),
            lnode("node3", **{REGION: "India"}),
        ],
        [apod("p1", S1, node="node1")],
    )
    assert c.scores(apod("in", {}, STAY_WITH_S1)) == {"node1": 100, "node2": 100, "node3": 0}


def test_anti_affinity_scores_away_from_matching_pods() -> None:
    c = Cluster(
        [lnode("node1", **{AZ: "az1"}), lnode("node2", **{REGION: "China"})],
        [apod("p1", S1, node="node1"), apod("p2", S2, node="node2")],
    )
    assert c.scores(apod("in", {}, AWAY_FROM_S1_IN_AZ)) == {"node1": 0, "node2": 100}


def test_symmetry_existing_pods_preferred_terms_pull_the_incoming_pod() -> None:
    c = Cluster(china_india_az(), [apod("p1", {}, STAY_WITH_S1, node="node1")])
    assert c.scores(apod("in", S1)) == {"node1": 100, "node2": 0, "node3": 0}
    # ignorePreferredTermsOfExistingPods: a pod without terms is not scored at all.
    ignoring = Cluster(
        china_india_az(),
        [apod("p1", {}, STAY_WITH_S1, node="node1")],
        args=InterPodAffinityArgs(ignore_preferred_terms_of_existing_pods=True),
    )
    assert ignoring.scores(apod("in", S1)) is None


def test_symmetry_existing_pods_required_affinity_weighs_hard_pod_affinity_weight() -> None:
    pods = [apod("p1", {}, HARD_S1, node="node1"), apod("p2", {}, HARD_S1, node="node2")]
    c = Cluster(china_india_az(), pods, args=InterPodAffinityArgs(hard_pod_affinity_weight=3))
    assert c.raw_scores(apod("in", S1)) == {"node1": 3, "node2": 3, "node3": 0}
    assert c.scores(apod("in", S1)) == {"node1": 100, "node2": 100, "node3": 0}
    off = Cluster(china_india_az(), pods, args=InterPodAffinityArgs(hard_pod_affinity_weight=0))
    assert off.scores(apod("in", S1)) is None


def test_existing_pods_preferred_anti_affinity_pushes_away() -> None:
    away = affinity(anti_preferred=[weighted(7, term(sel(security="S1"), REGION))])
    c = Cluster(china_india_az(), [apod("p1", {}, away, node="node2")])
    assert c.raw_scores(apod("in", S1)) == {"node1": 0, "node2": -7, "node3": 0}
    assert c.scores(apod("in", S1)) == {"node1": 100, "node2": 0, "node3": 100}


def test_min_max_normalisation_with_negative_raw_scores() -> None:
    both = affinity(
        preferred=[weighted(5, term(sel(security="S1"), REGION))],
        anti_preferred=[weighted(3, term(sel(security="S2"), REGION))],
    )
    c = Cluster(
        china_india_az(),
        [apod("p1", S1, node="node1"), apod("p2", S2, node="node2")],
    )
    assert c.raw_scores(apod("in", {}, both)) == {"node1": 5, "node2": -3, "node3": 0}
    # (s - min) * 100 / (max - min), truncated: 0 -> 3 * 100 / 8 = 37.5 -> 37.
    assert c.scores(apod("in", {}, both)) == {"node1": 100, "node2": 0, "node3": 37}


def test_several_keys_add_up_per_node() -> None:
    two = affinity(
        preferred=[
            weighted(2, term(sel(security="S1"), REGION)),
            weighted(10, term(sel(security="S1"), AZ)),
        ]
    )
    c = Cluster(
        [
            lnode("node1", **{REGION: "China", AZ: "az1"}),
            lnode("node2", **{REGION: "China", AZ: "az2"}),
            lnode("node3", **{REGION: "India", AZ: "az1"}),
        ],
        [apod("p1", S1, node="node1")],
    )
    assert c.raw_scores(apod("in", {}, two)) == {"node1": 12, "node2": 2, "node3": 10}
