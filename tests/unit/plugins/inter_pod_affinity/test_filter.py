"""InterPodAffinity Filter: the cases of kube-scheduler's filtering_test.go
(TestRequiredAffinitySingleNode, TestRequiredAffinityMultipleNodes), their reasons and
which rejections are unresolvable."""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.framework import CycleState
from gpusched.framework.interfaces import Allocation
from gpusched.framework.status import Code
from gpusched.plugins.inter_pod_affinity.plugin import (
    REASON_AFFINITY,
    REASON_ANTI_AFFINITY,
    REASON_EXISTING_ANTI_AFFINITY,
)
from tests.unit.plugins.inter_pod_affinity.support import (
    HOST,
    REGION,
    ZONE,
    Cluster,
    affinity,
    apod,
    expr,
    lnode,
    sel,
    term,
)

AFF = REASON_AFFINITY + "!"  # UnschedulableAndUnresolvable
ANTI = REASON_ANTI_AFFINITY
EXISTING = REASON_EXISTING_ANTI_AFFINITY
S1 = {"service": "securityscan"}


def one_node(incoming_aff: dict[str, Any], existing: list[Any], labels: Any = None) -> str:
    """The verdict on machine1 (region r1, zone z11) holding `existing`."""
    c = Cluster([lnode("machine1", **(labels or {REGION: "r1", ZONE: "z11"}))], existing)
    return c.filter(apod("incoming", {"service": "securityscan"} | {"app": "x"}, incoming_aff))[
        "machine1"
    ]


CASES: list[tuple[str, dict[str, Any], list[Any], str]] = [
    (
        "no required terms and no existing pods with anti-affinity: PreFilter skips",
        {},
        [],
        "skip",
    ),
    (
        "affinity In matching the existing pod",
        affinity([term(sel(expr("service", "In", "securityscan", "value2")), REGION)]),
        [apod("p1", S1, node="machine1")],
        "",
    ),
    (
        "affinity NotIn matching the existing pod",
        affinity([term(sel(expr("service", "NotIn", "securityscan3", "value3")), REGION)]),
        [apod("p1", S1, node="machine1")],
        "",
    ),
    (
        "affinity not met: the existing pod is in another namespace",
        affinity([term(sel(expr("service", "In", "securityscan")), REGION, namespaces=["other"])]),
        [apod("p1", S1, node="machine1")],
        AFF,
    ),
    (
        "affinity not met: the selector does not match the existing pod",
        affinity([term(sel(expr("service", "In", "antivirusscan", "value2")), REGION)]),
        [apod("p1", S1, node="machine1")],
        AFF,
    ),
    (
        "affinity with several operators in one term (ANDed) and two terms",
        affinity(
            [
                term(
                    sel(
                        expr("service", "Exists"),
                        expr("wrongkey", "DoesNotExist"),
                    ),
                    REGION,
                ),
                term(
                    sel(
                        expr("service", "In", "securityscan"),
                        expr("service", "NotIn", "WrongValue"),
                    ),
                    REGION,
                ),
            ]
        ),
        [apod("p1", S1, node="machine1")],
        "",
    ),
    (
        "matchExpressions are ANDed: one requirement fails",
        affinity(
            [
                term(
                    sel(expr("service", "Exists"), expr("wrongkey", "DoesNotExist")),
                    REGION,
                ),
                term(
                    sel(
                        expr("service", "In", "securityscan2"),
                        expr("service", "NotIn", "WrongValue"),
                    ),
                    REGION,
                ),
            ]
        ),
        [apod("p1", S1, node="machine1")],
        AFF,
    ),
    (
        "affinity and anti-affinity both satisfied",
        affinity(
            [term(sel(expr("service", "In", "securityscan", "value2")), REGION)],
            anti=[term(sel(expr("service", "In", "antivirusscan", "value2")), "node")],
        ),
        [apod("p1", S1, node="machine1")],
        "",
    ),
    (
        "affinity, anti-affinity and the existing pod's anti-affinity all satisfied",
        affinity(
            [term(sel(expr("service", "In", "securityscan", "value2")), REGION)],
            anti=[term(sel(expr("service", "In", "antivirusscan", "value2")), "node")],
        ),
        [
            apod(
                "p1",
                S1,
                affinity(
                    anti=[term(sel(expr("service", "In", "antivirusscan", "value2")), "node")]
                ),
                node="machine1",
            )
        ],
        "",
    ),
    (
        "affinity met, anti-affinity not",
        affinity(
            [term(sel(expr("service", "In", "securityscan", "value2")), REGION)],
            anti=[term(sel(expr("service", "In", "securityscan", "value2")), ZONE)],
        ),
        [apod("p1", S1, node="machine1")],
        ANTI,
    ),
    (
        "affinity and anti-affinity met, the existing pod's anti-affinity not (symmetry)",
        affinity(
            [term(sel(expr("service", "In", "securityscan", "value2")), REGION)],
            anti=[term(sel(expr("service", "In", "antivirusscan", "value2")), ZONE)],
        ),
        [
            apod(
                "p1",
                S1,
                affinity(anti=[term(sel(expr("service", "In", "securityscan", "value2")), ZONE)]),
                node="machine1",
            )
        ],
        EXISTING,
    ),
    (
        "the existing pod's anti-affinity is respected when the pod has no terms",
        {},
        [
            apod(
                "p1",
                S1,
                affinity(anti=[term(sel(expr("service", "In", "securityscan", "value2")), ZONE)]),
                node="machine1",
            )
        ],
        EXISTING,
    ),
    (
        "the existing pod's anti-affinity (NotIn) does not select the pod",
        {},
        [
            apod(
                "p1",
                S1,
                affinity(anti=[term(sel(expr("service", "NotIn", "securityscan")), ZONE)]),
                node="machine1",
            )
        ],
        "skip",  # nothing to enforce: upstream's PreFilter Skip, the node passes
    ),
    (
        "anti-affinity not met, whatever the existing pod says",
        affinity(anti=[term(sel(expr("service", "In", "securityscan")), ZONE)]),
        [
            apod(
                "p1",
                S1,
                affinity(anti=[term(sel(expr("service", "In", "nothing")), ZONE)]),
                node="machine1",
            )
        ],
        ANTI,
    ),
    (
        "the node lacks the affinity term's topology key",
        affinity([term(sel(expr("service", "In", "securityscan")), "rack")]),
        [apod("p1", S1, node="machine1")],
        AFF,
    ),
    (
        "the node lacks the anti-affinity term's topology key: no domain, no conflict",
        affinity(anti=[term(sel(expr("service", "In", "securityscan")), "rack")]),
        [apod("p1", S1, node="machine1")],
        "",
    ),
]


@pytest.mark.parametrize(
    ("incoming_aff", "existing", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_single_node(incoming_aff: dict[str, Any], existing: list[Any], want: str) -> None:
    assert one_node(incoming_aff, existing) == want


def test_first_pod_of_a_self_affine_group_goes_anywhere_with_the_key() -> None:
    own = affinity([term(sel(expr("app", "In", "web")), ZONE)])
    c = Cluster([lnode("a", **{ZONE: "z1"}), lnode("b", **{ZONE: "z2"}), lnode("nozone")])
    web = apod("w1", {"app": "web"}, own)
    assert c.filter(web) == {"a": "", "b": "", "nozone": AFF}
    # A pod that does not match its own terms gets no such pass.
    other = apod("o1", {"app": "api"}, own)
    assert c.filter(other) == {"a": AFF, "b": AFF, "nozone": AFF}
    # Once a matching pod exists, only its domain will do.
    c.cache.add_or_update_pod(apod("w0", {"app": "web"}, node="b"))
    assert c.filter(web) == {"a": AFF, "b": "", "nozone": AFF}


def test_self_affinity_pass_needs_no_match_anywhere_in_any_domain() -> None:
    # kube: "pod matches its own Label in PodAffinity and that matches the existing pod
    # Labels" - a matching pod on a node of another region blocks the pass.
    own = affinity([term(sel(expr("service", "In", "securityscan")), REGION)])
    c = Cluster(
        [lnode("m1", **{REGION: "r1"}), lnode("m2", **{REGION: "r2"})],
        [apod("p1", S1, node="m2")],
    )
    assert c.filter(apod("in", S1, own)) == {"m1": AFF, "m2": ""}


def test_required_affinity_needs_one_pod_matching_all_terms() -> None:
    # Two terms, each matched by a different pod in the zone: no single pod matches both.
    both = affinity([term(sel(app="web"), ZONE), term(sel(tier="front"), ZONE)])
    c = Cluster(
        [lnode("a", **{ZONE: "z1"}), lnode("b", **{ZONE: "z2"})],
        [apod("p1", {"app": "web"}, node="a"), apod("p2", {"tier": "front"}, node="a")],
    )
    assert c.filter(apod("in", {}, both)) == {"a": AFF, "b": AFF}
    c.cache.add_or_update_pod(apod("p3", {"app": "web", "tier": "front"}, node="b"))
    assert c.filter(apod("in", {}, both)) == {"a": AFF, "b": ""}


def test_anti_affinity_spreads_over_zone_domains_and_counts_assumed_pods() -> None:
    anti = affinity(anti=[term(sel(app="db"), ZONE)])
    c = Cluster(
        [
            lnode("a1", **{ZONE: "z1"}),
            lnode("a2", **{ZONE: "z1"}),
            lnode("b1", **{ZONE: "z2"}),
            lnode("bare"),
        ],
        [apod("db0", {"app": "db"}, node="a1")],
    )
    assert c.filter(apod("db1", {"app": "db"}, anti)) == {
        "a1": ANTI,
        "a2": ANTI,
        "b1": "",
        "bare": "",
    }
    # An assumed pod counts like a bound one.
    c.cache.assume(apod("db2", {"app": "db"}), Allocation("b1", c.snap.row_of("b1")))
    assert c.filter(apod("db1", {"app": "db"}, anti)) == {
        "a1": ANTI,
        "a2": ANTI,
        "b1": ANTI,
        "bare": "",
    }
    c.cache.forget("uid-db2")
    c.cache.remove_pod("uid-db0")
    assert c.filter(apod("db1", {"app": "db"}, anti)) == dict.fromkeys(
        ["a1", "a2", "b1", "bare"], ""
    )


def test_existing_anti_affinity_repels_by_domain_of_its_node() -> None:
    c = Cluster(
        [lnode("a1", **{ZONE: "z1"}), lnode("a2", **{ZONE: "z1"}), lnode("b1", **{ZONE: "z2"})],
        [apod("loner", {}, affinity(anti=[term(sel(app="noisy"), ZONE)]), node="a2")],
    )
    assert c.filter(apod("n1", {"app": "noisy"})) == {"a1": EXISTING, "a2": EXISTING, "b1": ""}
    assert c.filter(apod("q1", {"app": "quiet"})) == dict.fromkeys(["a1", "a2", "b1"], "skip")


def test_reason_order_affinity_then_anti_then_existing() -> None:
    c = Cluster(
        [lnode("a", **{ZONE: "z1"}), lnode("b", **{ZONE: "z2"}), lnode("c", **{ZONE: "z3"})],
        [
            apod("web", {"app": "web"}, node="a"),
            apod("web2", {"app": "web"}, node="b"),
            apod("guard", {}, affinity(anti=[term(sel(role="in"), ZONE)]), node="c"),
        ],
    )
    incoming = apod(
        "in",
        {"role": "in"},
        affinity([term(sel(app="web"), HOST)], anti=[term(sel(app="web"), ZONE)]),
    )
    got = c.filter(incoming)
    # a and b hold a web pod: affinity met there, anti-affinity not; c has no web pod.
    assert got == {"a": ANTI, "b": ANTI, "c": AFF}


def test_namespaces_and_namespace_selector() -> None:
    nodes = [lnode("a", **{ZONE: "z1"}), lnode("b", **{ZONE: "z2"})]
    pods = [apod("t1", {"app": "db"}, namespace="team-1", node="a")]
    labels = {"team-1": {"team": "one"}, "ns": {"team": "two"}}
    c = Cluster(nodes, pods, namespaces=labels)
    same_ns = affinity([term(sel(app="db"), ZONE)])
    assert c.filter(apod("in", {}, same_ns)) == {"a": AFF, "b": AFF}
    by_name = affinity([term(sel(app="db"), ZONE, namespaces=["team-1"])])
    assert c.filter(apod("in", {}, by_name)) == {"a": "", "b": AFF}
    by_label = affinity([term(sel(app="db"), ZONE, namespaceSelector=sel(team="one"))])
    assert c.filter(apod("in", {}, by_label)) == {"a": "", "b": AFF}
    every = affinity([term(sel(app="db"), ZONE, namespaceSelector={})])
    assert c.filter(apod("in", {}, every)) == {"a": "", "b": AFF}
    # Without namespace objects (the simulator) a label selector selects no namespace,
    # while `{}` still means every namespace.
    bare = Cluster(nodes, pods)
    assert bare.filter(apod("in", {}, by_label)) == {"a": AFF, "b": AFF}
    assert bare.filter(apod("in", {}, every)) == {"a": "", "b": AFF}


def test_existing_pods_namespace_selector_reads_the_incoming_pods_namespace() -> None:
    guard = affinity(anti=[term(sel(app="x"), HOST, namespaceSelector=sel(env="prod"))])
    c = Cluster(
        [lnode("a"), lnode("b")],
        [apod("g", {}, guard, namespace="ops", node="a")],
        namespaces={"prod-1": {"env": "prod"}, "dev-1": {"env": "dev"}},
    )
    assert c.filter(apod("p", {"app": "x"}, namespace="prod-1")) == {"a": EXISTING, "b": ""}
    assert c.filter(apod("d", {"app": "x"}, namespace="dev-1")) == {"a": "skip", "b": "skip"}


def test_match_label_keys_and_mismatch_label_keys() -> None:
    c = Cluster(
        [lnode("a"), lnode("b"), lnode("c")],
        [
            apod("old", {"app": "web", "hash": "v1"}, node="a"),
            apod("new", {"app": "web", "hash": "v2"}, node="b"),
        ],
    )
    # Anti-affinity only against the pods of the same revision (matchLabelKeys).
    same_rev = affinity(anti=[term(sel(app="web"), HOST, matchLabelKeys=["hash"])])
    assert c.filter(apod("in", {"app": "web", "hash": "v2"}, same_rev)) == {
        "a": "",
        "b": ANTI,
        "c": "",
    }
    # Affinity to web pods of any other revision (mismatchLabelKeys).
    other_rev = affinity([term(sel(app="web"), HOST, mismatchLabelKeys=["hash"])])
    assert c.filter(apod("in", {"app": "web", "hash": "v2"}, other_rev)) == {
        "a": "",
        "b": AFF,
        "c": AFF,
    }
    # A key the pod lacks adds nothing.
    assert c.filter(apod("in", {"app": "web"}, same_rev)) == {"a": ANTI, "b": ANTI, "c": ""}


def test_nil_label_selector_matches_nothing() -> None:
    c = Cluster([lnode("a")], [apod("p", {"app": "x"}, node="a")])
    anti = affinity(anti=[term(None, HOST)])
    assert c.filter(apod("in", {}, anti)) == {"a": ""}
    aff = affinity([term(None, HOST)])
    assert c.filter(apod("in", {}, aff)) == {"a": AFF}


def test_malformed_terms_are_unresolvable_with_the_field_named() -> None:
    c = Cluster([lnode("a")])
    bad = affinity(anti=[term(sel(expr("app", "Like", "x")), HOST), {"labelSelector": {}}])
    _, st = c.plugin.pre_filter(CycleState(), apod("in", {}, bad))
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    text = st.message()
    assert text.startswith("parsing pod: ")
    assert (
        "requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchExpressions[0].operator"
        in text
    )
    assert "[1].topologyKey: Required value" in text


def test_topology_label_change_moves_the_domain() -> None:
    anti = affinity(anti=[term(sel(app="db"), ZONE)])
    c = Cluster(
        [lnode("a", **{ZONE: "z1"}), lnode("b", **{ZONE: "z2"})],
        [apod("db0", {"app": "db"}, node="a")],
    )
    assert c.filter(apod("in", {"app": "db"}, anti)) == {"a": ANTI, "b": ""}
    c.cache.upsert_node(lnode("b", **{ZONE: "z1"}))
    assert c.filter(apod("in", {"app": "db"}, anti)) == {"a": ANTI, "b": ANTI}
