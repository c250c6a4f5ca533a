"""The differential test's independent checker, on hand-built API objects: each hard
constraint, once kept and once broken."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from gpusched.devcluster.diffcheck import (
    Outcome,
    check,
    parse_fit_message,
    pod_requests,
    ports_clash,
    quantity,
)

ZONE = "topology.kubernetes.io/zone"


def node(
    name: str, zone: str = "a", *, taints: Any = (), unschedulable: bool = False, **alloc: str
) -> dict[str, Any]:
    allocatable = {"cpu": "4", "memory": "8Gi", "pods": "10", **alloc}
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, ZONE: zone}},
        "spec": {"taints": list(taints), "unschedulable": unschedulable},
        "status": {"allocatable": allocatable},
    }


def pod(
    name: str, on: str = "", *, labels: dict[str, str] | None = None, ns: str = "ns", **spec: Any
) -> dict[str, Any]:
    requests = spec.pop("requests", {"cpu": "1"})
    container: dict[str, Any] = {"name": "c", "resources": {"requests": requests}}
    if "ports" in spec:
        container["ports"] = spec.pop("ports")
    body: dict[str, Any] = {"containers": [container], **spec}
    if on:
        body["nodeName"] = on
    return {"metadata": {"name": name, "namespace": ns, "labels": labels or {}}, "spec": body}


def violations(nodes: list[Any], pods: list[Any], **kw: Any) -> list[str]:
    return check(Outcome(nodes=nodes, pods=pods, **kw))


def test_quantities() -> None:
    assert quantity("100m") == Fraction(1, 10)
    assert quantity("2Gi") == 2 * 2**30
    assert quantity("1e3") == 1000
    assert quantity(4) == 4
    assert quantity("1.5k") == 1500
    with pytest.raises(ValueError, match="quantity"):
        quantity("lots")


def test_requests_count_sidecars_init_containers_and_overhead() -> None:
    p = pod("p", requests={"cpu": "1"})
    p["spec"]["initContainers"] = [
        {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
        {"name": "init", "resources": {"requests": {"cpu": "3"}}},
    ]
    p["spec"]["overhead"] = {"cpu": "100m"}
    # max(1 + 0.5 sidecar, 0.5 + 3 init) + 0.1 overhead
    assert pod_requests(p)["cpu"] == Fraction(36, 10)
    limits_only = {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
    assert pod_requests({"spec": limits_only}) == {"nvidia.com/gpu": 2}


def test_resources_within_allocatable() -> None:
    nodes = [node("n", **{"nvidia.com/gpu": "1", "ephemeral-storage": "10Gi"})]
    fits = [
        pod("a", "n", requests={"cpu": "2", "nvidia.com/gpu": "1"}),
        pod("b", "n", requests={"cpu": "2"}),
    ]
    assert violations(nodes, fits) == []
    over = [*fits, pod("c", "n", requests={"cpu": "1m", "nvidia.com/gpu": "1", "rdma/hca": "1"})]
    found = violations(nodes, over)
    assert any("cpu requested" in v for v in found)
    assert any("nvidia.com/gpu requested 2" in v for v in found)
    assert any("rdma/hca requested 1 > allocatable 0" in v for v in found)
    done = pod("d", "n", requests={"cpu": "4"})
    done["status"] = {"phase": "Succeeded"}
    assert violations(nodes, [*fits, done]) == []  # finished pods hold nothing
    crowd = [pod(f"p{i}", "n", requests={}) for i in range(11)]
    assert any("11 pods > allocatable" in v for v in violations(nodes, crowd))


def test_host_ports_with_wildcard_semantics() -> None:
    wild = ("TCP", "0.0.0.0", 80)
    assert ports_clash(wild, ("TCP", "10.0.0.1", 80))
    assert not ports_clash(("TCP", "10.0.0.1", 80), ("TCP", "10.0.0.2", 80))
    assert not ports_clash(wild, ("UDP", "0.0.0.0", 80))
    p80 = [{"containerPort": 8080, "hostPort": 80}]
    two = [
        pod("a", "n", ports=p80),
        pod("b", "n", ports=[{"containerPort": 1, "hostPort": 80, "hostIP": "1.2.3.4"}]),
    ]
    assert "host port" in violations([node("n")], two)[0]
    apart = [pod("a", "n", ports=p80), pod("b", "m", ports=p80)]
    assert violations([node("n"), node("m")], apart) == []


def test_node_selector_affinity_taints_and_cordon() -> None:
    taint = {"key": "gpu", "value": "x", "effect": "NoSchedule"}
    nodes = [node("a", "a"), node("b", "b", taints=[taint]), node("c", "c", unschedulable=True)]
    in_b = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["b"]}]}
                ]
            }
        }
    }
    tolerate = [{"key": "gpu", "operator": "Exists"}]
    ok = [
        pod("sel", "a", nodeSelector={ZONE: "a"}),
        pod("aff", "b", affinity=in_b, tolerations=tolerate),
        pod(
            "cordon",
            "c",
            tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}],
        ),
    ]
    assert violations(nodes, ok) == []
    bad = [
        pod("sel", "b", nodeSelector={ZONE: "a"}, tolerations=tolerate),
        pod("aff", "a", affinity=in_b),
        pod("taint", "b"),
        pod("cordon", "c"),
    ]
    found = " | ".join(violations(nodes, bad))
    assert found.count("node affinity excludes") == 2
    assert "does not tolerate" in found and "unschedulable" in found


def test_gated_pods_stay_unbound() -> None:
    gated = pod("g", "n", schedulingGates=[{"name": "hold"}])
    assert "scheduling-gated" in violations([node("n")], [gated])[0]
    assert violations([node("n")], [pod("g", schedulingGates=[{"name": "hold"}])]) == []


def _term(app: str, key: str = "kubernetes.io/hostname", **extra: Any) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key, **extra}


def test_required_pod_anti_affinity() -> None:
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term("web")]}}
    web = {"app": "web"}
    nodes = [node("n1"), node("n2")]
    apart = [pod("w1", "n1", labels=web, affinity=anti), pod("w2", "n2", labels=web, affinity=anti)]
    assert violations(nodes, apart) == []
    together = [
        pod("w1", "n1", labels=web, affinity=anti),
        pod("w2", "n1", labels=web, affinity=anti),
    ]
    assert len(violations(nodes, together)) == 2
    # An existing pod's anti-affinity against a newcomer without any term of its own.
    assert any("w1" in v for v in violations(nodes, [together[0], pod("x", "n1", labels=web)]))
    # Another namespace is out of the term's reach unless a namespaceSelector brings it in.
    other = pod("db", "n1", labels={"app": "db"}, ns="team")
    shy = pod(
        "s",
        "n1",
        affinity={
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term("db")]}
        },
    )
    assert violations(nodes, [other, shy]) == []
    by_label = _term("db", namespaceSelector={"matchLabels": {"t": "x"}})
    shy2 = pod(
        "s",
        "n1",
        affinity={
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [by_label]}
        },
    )
    assert len(violations(nodes, [other, shy2], namespaces={"team": {"t": "x"}, "ns": {}})) == 1
    assert violations(nodes, [other, shy2], namespaces={"team": {"t": "y"}, "ns": {}}) == []


def test_required_pod_affinity() -> None:
    aff = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term("db", ZONE)]}}
    nodes = [node("a1", "a"), node("a2", "a"), node("b1", "b")]
    db = pod("db", "a1", labels={"app": "db"})
    assert violations(nodes, [db, pod("near", "a2", affinity=aff)]) == []
    assert (
        "no pod its affinity selects" in violations(nodes, [db, pod("far", "b1", affinity=aff)])[0]
    )
    # Alone and matching its own term: the first of a self-affine group goes anywhere.
    assert violations(nodes, [pod("first", "b1", labels={"app": "db"}, affinity=aff)]) == []
    # Alone and not matching it: nothing to be near.
    assert len(violations(nodes, [pod("lonely", "b1", affinity=aff)])) == 1
    # A self-affine pair split over two zones: neither was first.
    pair = [pod(f"c{i}", n, labels={"app": "db"}, affinity=aff) for i, n in enumerate(("a1", "b1"))]
    assert len(violations(nodes, pair)) == 2


def _spread(app: str, key: str = ZONE, skew: int = 1, **extra: Any) -> list[dict[str, Any]]:
    return [
        {
            "maxSkew": skew,
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": app}},
            **extra,
        }
    ]


def test_hard_topology_spread_and_min_domains() -> None:
    nodes = [node("a1", "a"), node("b1", "b"), node("c1", "c")]
    s = {"app": "s"}

    def group(*where: str, **extra: Any) -> list[dict[str, Any]]:
        return [
            pod(f"s{i}", n, labels=s, topologySpreadConstraints=_spread("s", **extra))
            for i, n in enumerate(where)
        ]

    assert violations(nodes, group("a1", "b1", "c1", "a1")) == []
    assert any("skew 2 > maxSkew 1" in v for v in violations(nodes, group("a1", "a1", "b1")))
    # Soft constraints are not checked.
    soft = group("a1", "a1", "a1")
    for p in soft:
        p["spec"]["topologySpreadConstraints"][0]["whenUnsatisfiable"] = "ScheduleAnyway"
    assert violations(nodes, soft) == []
    # Two of three zones eligible by node affinity: the third does not count as empty.
    only_ab = group("a1", "b1", "a1")
    assert violations(nodes, only_ab)  # c counts: skew 2
    for p in only_ab:
        p["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": ZONE, "operator": "In", "values": ["a", "b"]}
                            ]
                        }
                    ]
                }
            }
        }
    assert violations(nodes, only_ab) == []
    # minDomains 4 over 3 zones: the minimum counts as 0, so each zone holds at most maxSkew.
    assert any(
        "minDomains 4" in v for v in violations(nodes, group("a1", "b1", "c1", "a1", minDomains=4))
    )
    assert violations(nodes, group("a1", "b1", "c1", minDomains=4)) == []
    # A node without the key cannot hold a pod spread over it.
    assert "lacks" in violations(nodes, group("a1", key="rack"))[0]


def test_volume_node_affinity_of_bound_claims() -> None:
    nodes = [node("a1", "a"), node("b1", "b")]
    pv = {
        "metadata": {"name": "pv"},
        "spec": {
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["a"]}]}
                    ]
                }
            }
        },
    }
    claim = {"metadata": {"name": "data", "namespace": "ns"}, "spec": {"volumeName": "pv"}}
    vol = [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}]
    kw = {"claims": {"ns/data": claim}, "volumes": {"pv": pv}}
    assert violations(nodes, [pod("p", "a1", volumes=vol)], **kw) == []
    assert "outside the node affinity" in violations(nodes, [pod("p", "b1", volumes=vol)], **kw)[0]
    assert "does not exist" in violations(nodes, [pod("p", "a1", volumes=vol)])[0]


def test_judged_skips_pods_no_scheduler_placed_but_counts_their_resources() -> None:
    nodes = [node("n", taints=[{"key": "k", "effect": "NoSchedule"}])]
    anchor = pod("anchor", "n", labels={"prebound": "1"}, requests={"cpu": "4"})
    out = check(
        Outcome(nodes=nodes, pods=[anchor]), lambda p: "prebound" not in p["metadata"]["labels"]
    )
    assert out == []
    out = check(
        Outcome(nodes=nodes, pods=[anchor, pod("x", "n", tolerations=[{"operator": "Exists"}])])
    )
    assert any("cpu requested 5" in v for v in out)


def test_fit_messages_parse_into_reason_counts() -> None:
    kube = (
        "0/24 nodes are available: 1 node(s) were unschedulable, 20 Insufficient nvidia.com/gpu,"
        " 3 node(s) had untolerated taint(s). no new claims to deallocate, preemption: 0/24"
        " nodes are available: 24 Preemption is not helpful for scheduling."
    )
    ours = (
        "0/24 nodes are available: 1 node(s) were unschedulable, 20 Insufficient nvidia.com/gpu,"
        " 3 node(s) had untolerated taint(s)."
    )
    a, b = parse_fit_message(kube), parse_fit_message(ours)
    assert a.reasons == {
        "node(s) were unschedulable": 1,
        "Insufficient nvidia.com/gpu": 20,
        "node(s) had untolerated taint(s)": 3,
    }
    assert a.shape == b.shape and "preemption: " in a.post_filter and b.post_filter == ""
    pre = parse_fit_message(
        "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: x"
    )
    assert (pre.pre_filter, pre.reasons) == ("pod has unbound immediate PersistentVolumeClaims", {})
    # Two reasons of one plugin on one node may sum past the total; one count may not.
    assert (
        parse_fit_message(
            "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory."
        ).total
        == 1
    )
    for bad in (
        "no nodes",
        "0/2 nodes are available: 3 Insufficient cpu.",
        "0/2 nodes are available: 1 Insufficient cpu, 1 Insufficient cpu.",
    ):
        with pytest.raises(ValueError, match=r"message|count|twice"):
            parse_fit_message(bad)
