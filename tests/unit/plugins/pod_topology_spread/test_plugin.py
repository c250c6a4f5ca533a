"""PodTopologySpread: kube-scheduler's filtering and scoring table tests, reproduced over the
real cache (bound, assumed, terminating pods; namespaces) and the snapshot's label sets."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from gpusched.config.args import convert
from gpusched.config.profile import ConfigError
from gpusched.core.cache.cache import ClusterCache
from gpusched.core.handle import SchedulerHandle
from gpusched.framework import (
    Code,
    CycleState,
    FilterPlugin,
    NormalizeScorePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    ScorePlugin,
)
from gpusched.framework.interfaces import Allocation
from gpusched.model.node import NodeModel
from gpusched.model.pod import PodInfo, pod_from_k8s
from gpusched.plugins.pod_topology_spread import PodTopologySpread, PodTopologySpreadArgs
from tests.builders import node, pod, reasons_by_node, rows_of, snapshot
from tests.fakes import FakeCluster

SKEW = "node(s) didn't match pod topology spread constraints"
MISSING = "node(s) didn't match pod topology spread constraints (missing required label)"
HOST = "kubernetes.io/hostname"
FOO = {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}
BAR = {"matchExpressions": [{"key": "bar", "operator": "Exists"}]}


def spread(
    max_skew: int, key: str, hard: bool = True, selector: Any = FOO, **extra: Any
) -> dict[str, Any]:
    return {
        "maxSkew": max_skew,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
        "labelSelector": selector,
        **extra,
    }


def incoming(
    *constraints: Mapping[str, Any], labels: Mapping[str, str] | None = None, **kw: Any
) -> PodInfo:
    return pod(
        "incoming",
        labels=dict(labels if labels is not None else {"foo": ""}),
        topology_spread_constraints=tuple(constraints),
        **kw,
    )


def hosts(*names: str, **labels: str) -> list[NodeModel]:
    return [node(n, labels={HOST: n, **labels}) for n in names]


class World:
    """A cache with nodes and bound pods, the real handle, the plugin under test."""

    def __init__(
        self,
        nodes: Sequence[NodeModel],
        pods: Mapping[str, Sequence[Mapping[str, str]]] = {},
        args: PodTopologySpreadArgs | None = None,
    ) -> None:
        self.cache = ClusterCache(snapshot(*nodes))
        self.snap = self.cache.snapshot
        self.plugin = PodTopologySpread(args, SchedulerHandle(self.cache, FakeCluster(), lambda: 0))
        self.n = 0
        for where, label_sets in pods.items():
            for labels in label_sets:
                self.bind(where, labels)

    def bind(self, where: str, labels: Mapping[str, str], **kw: Any) -> PodInfo:
        self.n += 1
        p = pod(f"e{self.n}", labels=dict(labels), node_name=where, phase="Running", **kw)
        self.cache.add_or_update_pod(p)
        return p

    def filter(self, p: PodInfo) -> dict[str, str]:
        """node -> reason for every rejected node ("" when PreFilter skipped the pod)."""
        state = CycleState()
        _, st = self.plugin.pre_filter(state, p)
        assert st.is_success(), st
        cands = self.snap.node_valid.copy()
        res = self.plugin.filter(state, p, cands)
        out = reasons_by_node(self.snap, cands, res)
        if res.unresolvable is not False:
            unres = {
                self.snap.names[r] for r in np.flatnonzero(cands & ~res.feasible & res.unresolvable)
            }  # type: ignore[operator]
            assert unres == {n for n, r in out.items() if r == MISSING}
        return out

    def scores(self, p: PodInfo, *names: str) -> dict[str, int]:
        rows = rows_of(self.snap, *names)
        state = CycleState()
        st = self.plugin.pre_score(state, p, rows)
        assert st.is_success(), st
        raw = self.plugin.score(state, p, rows)
        self.plugin.normalize(state, p, raw)
        return dict(zip(names, (int(s) for s in raw), strict=True))


def test_is_every_point() -> None:
    plugin = World(hosts("a")).plugin
    for proto in (PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin, NormalizeScorePlugin):
        assert isinstance(plugin, proto)


# -- Filter: TestSingleConstraint / TestMultipleConstraints shapes -------------------------


def zones() -> list[NodeModel]:
    return [
        node("node-a", labels={"zone": "zone1", HOST: "node-a"}),
        node("node-b", labels={"zone": "zone1", HOST: "node-b"}),
        node("node-x", labels={"zone": "zone2", HOST: "node-x"}),
        node("node-y", labels={"zone": "zone2", HOST: "node-y"}),
    ]


def test_no_existing_pods_all_nodes_fit() -> None:
    assert World(zones()).filter(incoming(spread(1, "zone"))) == {}


def test_zone_skew_rejects_the_crowded_zone() -> None:
    # zone1 holds 2 matching pods, zone2 1: zone1 would reach 3 - 1 = 2 > maxSkew 1.
    w = World(zones(), {"node-a": [{"foo": ""}], "node-b": [{"foo": ""}], "node-x": [{"foo": ""}]})
    assert w.filter(incoming(spread(1, "zone"))) == {"node-a": SKEW, "node-b": SKEW}
    assert w.filter(incoming(spread(2, "zone"))) == {}


def test_pods_of_other_namespaces_terminating_pods_and_non_matching_pods_do_not_count() -> None:
    w = World(zones(), {"node-a": [{"foo": ""}], "node-x": [{"foo": ""}]})
    w.cache.add_or_update_pod(
        replace(pod("elsewhere", labels={"foo": ""}, node_name="node-b"), namespace="other")
    )
    w.bind("node-b", {"foo": ""}, deleting=True)
    w.bind("node-b", {"bar": ""})
    assert w.filter(incoming(spread(1, "zone"))) == {}


def test_assumed_pods_count() -> None:
    w = World(zones(), {"node-a": [{"foo": ""}]})
    p = incoming(spread(1, "zone"))
    assert w.filter(p) == {"node-a": SKEW, "node-b": SKEW}
    w.cache.assume(
        pod("assumed", labels={"foo": ""}), Allocation("node-x", w.snap.row_of("node-x"))
    )
    assert w.filter(p) == {}


def test_node_without_the_key_is_unresolvable_and_not_counted() -> None:
    nodes = [*zones(), node("node-c", labels={HOST: "node-c"})]
    # node-c's 5 pods are in no zone: they count for no domain.
    w = World(nodes, {"node-c": [{"foo": ""}] * 5, "node-a": [{"foo": ""}]})
    assert w.filter(incoming(spread(1, "zone"))) == {
        "node-a": SKEW,
        "node-b": SKEW,
        "node-c": MISSING,
    }


def test_self_match_only_when_the_incoming_pod_matches() -> None:
    w = World(zones(), {"node-a": [{"foo": ""}]})
    # Without foo the incoming pod adds nothing to a domain: 1 + 0 - 0 <= 1.
    assert w.filter(incoming(spread(1, "zone"), labels={"other": ""})) == {}


def test_hostname_spread_2_1_0_3() -> None:
    # TestSingleConstraint "pods spread across nodes as 2/1/0/3, only node-x fits".
    w = World(
        hosts("node-a", "node-b", "node-x", "node-y"),
        {"node-a": [{"foo": ""}] * 2, "node-b": [{"foo": ""}], "node-y": [{"foo": ""}] * 3},
    )
    assert w.filter(incoming(spread(1, HOST))) == {
        "node-a": SKEW,
        "node-b": SKEW,
        "node-y": SKEW,
    }
    # maxSkew 2: node-b (1 + 1 - 0) and node-x fit.
    assert w.filter(incoming(spread(2, HOST))) == {"node-a": SKEW, "node-y": SKEW}


def test_min_domains_treats_the_global_minimum_as_zero() -> None:
    w = World(hosts("node-a", "node-b"), {"node-a": [{"foo": ""}], "node-b": [{"foo": ""}]})
    assert w.filter(incoming(spread(1, HOST))) == {}
    # 2 domains < minDomains 3: minimum 0, so 1 + 1 - 0 = 2 > 1 on both.
    assert w.filter(incoming(spread(1, HOST, minDomains=3))) == {
        "node-a": SKEW,
        "node-b": SKEW,
    }
    assert w.filter(incoming(spread(1, HOST, minDomains=2))) == {}


def test_node_affinity_policy_honor_and_ignore() -> None:
    # 2/1/0 over a, b, c; the pod selects role=x (a and b) with its nodeSelector.
    nodes = [
        node("a", labels={HOST: "a", "role": "x"}),
        node("b", labels={HOST: "b", "role": "x"}),
        node("c", labels={HOST: "c"}),
    ]
    w = World(nodes, {"a": [{"foo": ""}] * 2, "b": [{"foo": ""}]})
    honor = incoming(spread(1, HOST), node_selector={"role": "x"})
    # Honor (default): c is not counted, the minimum is b's 1; b fits (1 + 1 - 1).
    assert w.filter(honor) == {"a": SKEW}
    ignore = incoming(spread(1, HOST, nodeAffinityPolicy="Ignore"), node_selector={"role": "x"})
    # Ignore: c's 0 is the minimum; b would reach 2.
    assert w.filter(ignore) == {"a": SKEW, "b": SKEW}


def test_node_affinity_policy_honours_required_terms() -> None:
    nodes = [
        node("a", labels={HOST: "a", "role": "x"}),
        node("b", labels={HOST: "b", "role": "x"}),
        node("c", labels={HOST: "c"}),
    ]
    w = World(nodes, {"a": [{"foo": ""}] * 2, "b": [{"foo": ""}]})
    term = {"matchExpressions": [{"key": "role", "operator": "In", "values": ["x"]}]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }
    assert w.filter(incoming(spread(1, HOST), affinity=affinity)) == {"a": SKEW}


def test_node_taints_policy_honor_and_ignore() -> None:
    nodes = [*hosts("a", "b"), node("c", labels={HOST: "c"}, taints=[("k", "v", "NoSchedule")])]
    w = World(nodes, {"a": [{"foo": ""}] * 2, "b": [{"foo": ""}]})
    # Ignore (default): tainted c's 0 is the minimum.
    assert w.filter(incoming(spread(1, HOST))) == {"a": SKEW, "b": SKEW}
    assert w.filter(incoming(spread(1, HOST, nodeTaintsPolicy="Honor"))) == {"a": SKEW}
    tolerant = incoming(
        spread(1, HOST, nodeTaintsPolicy="Honor"),
        tolerations=({"key": "k", "operator": "Exists"},),
    )
    assert w.filter(tolerant) == {"a": SKEW, "b": SKEW}


def test_match_label_keys_and_the_incoming_pods_value() -> None:
    w = World(hosts("a", "b"), {"a": [{"foo": "", "rev": "1"}] * 2})
    plain = incoming(spread(1, HOST), labels={"foo": "", "rev": "2"})
    assert w.filter(plain) == {"a": SKEW}
    keyed = incoming(spread(1, HOST, matchLabelKeys=["rev"]), labels={"foo": "", "rev": "2"})
    assert w.filter(keyed) == {}  # only rev=2 pods count: none yet
    w.bind("a", {"foo": "", "rev": "2"})
    w.bind("a", {"foo": "", "rev": "2"})
    assert w.filter(keyed) == {"a": SKEW}
    # A key the incoming pod lacks adds nothing to the selector.
    absent = incoming(spread(1, HOST, matchLabelKeys=["missing"]), labels={"foo": ""})
    assert w.filter(absent) == {"a": SKEW}


def test_two_constraints_first_failure_gives_the_reason() -> None:
    nodes = [
        node("node-a", labels={"zone": "zone1", HOST: "node-a"}),
        node("node-b", labels={"zone": "zone1", HOST: "node-b"}),
        node("node-x", labels={"zone": "zone2", HOST: "node-x"}),
        node("node-y", labels={"zone": "zone2"}),  # no hostname label
    ]
    w = World(nodes, {"node-a": [{"foo": ""}] * 2, "node-x": [{"foo": ""}]})
    # zone: zone1 3 vs zone2 1 -> zone1 fails; hostname: eligible a (2), b (0), x (1):
    # b and x pass (0+1-0, 1+1-0 > 1 fails x). node-y lacks the hostname label.
    got = w.filter(incoming(spread(1, "zone"), spread(1, HOST)))
    assert got == {"node-a": SKEW, "node-b": SKEW, "node-x": SKEW, "node-y": MISSING}


def test_empty_selector_counts_no_pod_but_matches_itself() -> None:
    w = World(hosts("a", "b"), {"a": [{"foo": ""}] * 3})
    assert w.filter(incoming(spread(1, HOST, selector={}))) == {}
    # nil selector: nothing counted, no self-match.
    assert w.filter(incoming(spread(1, HOST, selector=None))) == {}


def test_pre_filter_skips_pods_without_hard_constraints() -> None:
    w = World(hosts("a"))
    for p in (pod("plain"), incoming(spread(1, HOST, hard=False))):
        assert w.plugin.pre_filter(CycleState(), p)[1].is_skip()


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            {"maxSkew": 0, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule"},
            "spec.topologySpreadConstraints[0].maxSkew: Invalid value: 0: must be greater than",
        ),
        (
            {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "Maybe"},
            'spec.topologySpreadConstraints[0].whenUnsatisfiable: Unsupported value: "Maybe"',
        ),
        (
            spread(1, HOST, selector={"matchExpressions": [{"key": "foo", "operator": "In"}]}),
            "spec.topologySpreadConstraints[0].labelSelector.matchExpressions[0].values",
        ),
        (
            spread(1, HOST, nodeTaintsPolicy="Sometimes"),
            'nodeTaintsPolicy: Unsupported value: "Sometimes"',
        ),
    ],
)
def test_malformed_constraints_are_unresolvable_with_the_field(bad: Any, message: str) -> None:
    _, st = World(hosts("a")).plugin.pre_filter(CycleState(), incoming(bad))
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert message in st.message()


# -- Score: TestPodTopologySpreadScore shapes ------------------------------------------------


def four_hosts(spread_as: Sequence[int]) -> World:
    names = ("node-a", "node-b", "node-c", "node-d")
    return World(
        hosts(*names), {n: [{"foo": ""}] * c for n, c in zip(names, spread_as, strict=True)}
    )


@pytest.mark.parametrize(
    ("max_skew", "spread_as", "want"),
    [
        (2, (2, 1, 0, 3), (33, 66, 100, 16)),
        (3, (4, 3, 2, 1), (44, 66, 77, 100)),
        (1, (1, 1, 1, 1), (100, 100, 100, 100)),
    ],
)
def test_score_one_constraint_on_hostname(
    max_skew: int, spread_as: Sequence[int], want: Sequence[int]
) -> None:
    w = four_hosts(spread_as)
    got = w.scores(
        incoming(spread(max_skew, HOST, hard=False)), "node-a", "node-b", "node-c", "node-d"
    )
    assert tuple(got.values()) == tuple(want)


def test_score_three_of_four_candidates() -> None:
    names = ("node-a", "node-b", "node-x", "node-y")
    w = World(
        hosts(*names),
        {
            "node-a": [{"foo": ""}] * 4,
            "node-b": [{"foo": ""}] * 2,
            "node-x": [{"foo": ""}],
            "node-y": [{"foo": ""}] * 3,
        },
    )
    p = incoming(spread(1, HOST, hard=False))
    assert w.scores(p, "node-a", "node-b", "node-x") == {"node-a": 33, "node-b": 83, "node-x": 100}


def test_score_node_without_the_key_is_ignored() -> None:
    nodes = [
        node("node-a", labels={HOST: "node-a"}),
        node("node-b", labels={"n": "node-b"}),
        *hosts("node-x", "node-y"),
    ]
    w = World(
        nodes,
        {
            "node-a": [{"foo": ""}] * 4,
            "node-b": [{"foo": ""}] * 2,
            "node-x": [{"foo": ""}],
            "node-y": [{"foo": ""}] * 3,
        },
    )
    p = incoming(spread(1, HOST, hard=False))
    assert w.scores(p, "node-a", "node-b", "node-x") == {"node-a": 16, "node-b": 0, "node-x": 100}


def test_score_zone_three_of_four_candidates() -> None:
    nodes = [
        node("node-a", labels={"zone": "zone1", HOST: "node-a"}),
        node("node-b", labels={"zone": "zone1", HOST: "node-b"}),
        node("node-x", labels={"zone": "zone2", HOST: "node-x"}),
        node("node-y", labels={"zone": "zone2", HOST: "node-y"}),
    ]
    w = World(
        nodes,
        {
            "node-a": [{"foo": ""}] * 4,
            "node-b": [{"foo": ""}] * 2,
            "node-x": [{"foo": ""}],
            "node-y": [{"foo": ""}] * 3,
        },
    )
    p = incoming(spread(1, "zone", hard=False))
    assert w.scores(p, "node-a", "node-b", "node-x") == {"node-a": 75, "node-b": 75, "node-x": 100}


def test_score_two_constraints_two_of_four_candidates() -> None:
    w = World(
        zones(),
        {
            "node-a": [{"foo": ""}] * 2,
            "node-b": [{"foo": ""}],
            "node-x": [{"foo": ""}] * 2,
            "node-y": [{"foo": ""}] * 4,
        },
    )
    p = incoming(spread(1, "zone", hard=False), spread(1, HOST, hard=False))
    assert w.scores(p, "node-a", "node-x") == {"node-a": 100, "node-x": 63}


@pytest.mark.parametrize(
    ("existing", "names", "want"),
    [
        (
            {
                "node-a": [{"foo": ""}],
                "node-b": [{"foo": "", "bar": ""}],
                "node-y": [{"foo": ""}, {"bar": ""}],
            },
            ("node-a", "node-b", "node-x", "node-y"),
            (60, 20, 100, 60),
        ),
        (
            {"node-b": [{"bar": ""}], "node-x": [{"foo": ""}], "node-y": [{"foo": "", "bar": ""}]},
            ("node-a", "node-b", "node-x", "node-y"),
            (100, 60, 40, 0),
        ),
        (
            {
                "node-a": [{"foo": ""}],
                "node-b": [{"foo": "", "bar": ""}],
                "node-y": [{"foo": ""}, {"bar": ""}],
            },
            ("node-a", "node-b", "node-x"),
            (50, 25, 100),
        ),
    ],
)
def test_score_two_constraints_with_different_selectors(
    existing: Mapping[str, Sequence[Mapping[str, str]]], names: Sequence[str], want: Sequence[int]
) -> None:
    w = World(zones(), existing)
    p = incoming(
        spread(1, "zone", hard=False),
        spread(1, HOST, hard=False, selector=BAR),
        labels={"foo": "", "bar": ""},
    )
    assert tuple(w.scores(p, *names).values()) == tuple(want)


# -- the cluster defaults ------------------------------------------------------------------


def owned(name: str, uid: str = "rs-1", kind: str = "ReplicaSet") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": {"app": "web"},
            "ownerReferences": [
                {"kind": "Deployment", "name": "x", "uid": "dep"},
                {"kind": kind, "name": "web-1", "uid": uid, "controller": True},
            ],
        },
        "spec": {"containers": [{"name": "c"}]},
    }


def test_system_defaults_spread_a_replica_sets_pods_like_a_service() -> None:
    # "system defaulting, nodes don't have zone, pods match service": 4/3/2/1 -> 44/66/77/100.
    w = four_hosts((0, 0, 0, 0))
    for name, count in zip(("node-a", "node-b", "node-c", "node-d"), (4, 3, 2, 1), strict=True):
        for _ in range(count):
            w.bind(name, {"app": "web"}, controller=("ReplicaSet", "rs-1"))
    for name in ("node-a", "node-b"):  # another ReplicaSet's pods do not count
        w.bind(name, {"app": "web"}, controller=("ReplicaSet", "rs-2"))
    p = pod_from_k8s(owned("new"))
    assert p.controller == ("ReplicaSet", "rs-1")
    got = w.scores(p, "node-a", "node-b", "node-c", "node-d")
    assert got == {"node-a": 44, "node-b": 66, "node-c": 77, "node-d": 100}
    # The system defaults are soft only.
    assert w.plugin.pre_filter(CycleState(), p)[1].is_skip()


@pytest.mark.parametrize("kind", ["Job", "Deployment", ""])
def test_defaults_skip_pods_without_a_replica_controller(kind: str) -> None:
    w = four_hosts((1, 0, 0, 0))
    p = pod_from_k8s(owned("new", kind=kind)) if kind else pod("bare", labels={"app": "web"})
    assert w.plugin.pre_score(CycleState(), p, rows_of(w.snap, "node-a")).is_skip()


def test_list_defaults_can_be_hard() -> None:
    args = convert(
        PodTopologySpreadArgs,
        {
            "defaultingType": "List",
            "defaultConstraints": [
                {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule"}
            ],
        },
    )
    w = World(hosts("a", "b"), args=args)
    w.bind("a", {"app": "web"}, controller=("StatefulSet", "ss"))
    p = replace(pod("new", labels={"app": "web"}), controller=("StatefulSet", "ss"))
    assert w.filter(p) == {"a": SKEW}
    # Own constraints replace the defaults entirely.
    own = replace(p, topology_spread_constraints=(spread(5, HOST),))
    assert w.filter(own) == {}


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        (
            {
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "ScheduleAnyway"}
                ]
            },
            "defaultConstraints",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 0, "topologyKey": "z", "whenUnsatisfiable": "ScheduleAnyway"}
                ],
            },
            "defaultConstraints[0].maxSkew",
        ),
        ({"defaultingType": "Sometimes"}, "defaultingType"),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "ScheduleAnyway"}
                ]
                * 2,
            },
            "defaultConstraints[1]",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "z",
                        "whenUnsatisfiable": "ScheduleAnyway",
                        "labelSelector": {},
                    }
                ],
            },
            "defaultConstraints[0].labelSelector",
        ),
    ],
)
def test_args_refused_with_their_path(raw: Mapping[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as err:
        convert(PodTopologySpreadArgs, raw, "args")
    assert f"args.{path}" in str(err.value)


def test_parsed_from_the_pod_spec() -> None:
    raw = owned("p")
    raw["spec"]["topologySpreadConstraints"] = [spread(1, "zone")]
    p = pod_from_k8s(raw)
    assert p.topology_spread_constraints == (spread(1, "zone"),)
    assert not p.errors
