"""The cache's pod indexes: count_matching_pods equals a walk over every pod whatever the
adds, relabels, assumes and removals; pods_with_affinity follows the pods' terms."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.core.cache.cache import ClusterCache
from gpusched.framework.interfaces import Allocation
from gpusched.model.pod import PodInfo, PodRequest
from tests.builders import node, snapshot

NODES = ("a", "b", "c")
NAMESPACES = ("n1", "n2")
KEYS = ("app", "tier")
VALUES = ("x", "y")


@dataclass(frozen=True)
class Matcher:
    namespaces: frozenset[str] | None
    anchor: tuple[str, frozenset[str] | None] | None
    want: tuple[tuple[str, str], ...]  # every (key, value) must be on the pod

    def matches(self, pod: PodInfo) -> bool:
        ns_ok = self.namespaces is None or pod.namespace in self.namespaces
        return ns_ok and all(pod.labels.get(k) == v for k, v in self.want)


labels_st = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=2)
ops_st = st.lists(
    st.tuples(
        st.sampled_from(("bind", "assume", "relabel", "remove")),
        st.integers(0, 7),
        st.sampled_from(NODES),
        st.sampled_from(NAMESPACES),
        labels_st,
    ),
    max_size=40,
)
matchers_st = st.builds(
    lambda ns, pairs, use_anchor: Matcher(
        ns,
        (pairs[0][0], frozenset({pairs[0][1]})) if pairs and use_anchor else None,
        tuple(pairs),
    ),
    st.one_of(st.none(), st.frozensets(st.sampled_from(NAMESPACES))),
    st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(VALUES)), max_size=2),
    st.booleans(),
)


def brute(cache: ClusterCache, m: Matcher) -> list[int]:
    out = np.zeros(len(cache.snapshot.node_valid), np.int64)
    for e in cache.pods.values():
        if m.matches(e.pod):
            out[cache.snapshot.row_of(e.node)] += 1
    return out.tolist()


@settings(max_examples=150, deadline=None)
@given(ops_st, st.lists(matchers_st, min_size=1, max_size=4), st.integers(0, 40))
def test_counts_equal_a_walk_over_every_pod(ops: list, matchers: list[Matcher], early: int) -> None:
    cache = ClusterCache(snapshot(*(node(n) for n in NODES)))
    for i, (op, k, where, ns, labels) in enumerate(ops):
        if i == early:  # the index is built lazily on the first count: before or after
            cache.count_matching_pods(matchers[0])
        uid = f"u{k}"
        entry = cache.get(uid)
        if op == "remove":
            cache.remove_pod(uid)
            cache.forget(uid)
        elif op == "relabel" and entry is not None and not entry.assumed:
            pod = entry.pod
            cache.add_or_update_pod(
                PodInfo(
                    uid,
                    pod.namespace,
                    pod.name,
                    pod.request,
                    node_name=pod.node_name,
                    labels=labels,
                )
            )
        elif op == "bind" and entry is None:
            cache.add_or_update_pod(
                PodInfo(uid, ns, uid, PodRequest(), node_name=where, labels=labels)
            )
        elif op == "assume" and entry is None:
            cache.assume(
                PodInfo(uid, ns, uid, PodRequest(), labels=labels),
                Allocation(where, cache.snapshot.row_of(where)),
            )
    for m in matchers:
        assert cache.count_matching_pods(m).tolist() == brute(cache, m)


def test_pods_with_affinity_follow_the_terms() -> None:
    cache = ClusterCache(snapshot(node("a")))
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}}
    soft = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{}]}}
    cache.add_or_update_pod(PodInfo("u1", "n", "p1", PodRequest(), node_name="a", affinity=anti))
    cache.add_or_update_pod(PodInfo("u2", "n", "p2", PodRequest(), node_name="a", affinity=soft))
    cache.add_or_update_pod(PodInfo("u3", "n", "p3", PodRequest(), node_name="a"))
    row = cache.snapshot.row_of("a")
    assert sorted(p.name for p, r in cache.pods_with_affinity() if r == row) == ["p1", "p2"]
    assert [p.name for p, _ in cache.pods_with_affinity(required_anti_only=True)] == ["p1"]
    cache.remove_pod("u1")
    assert cache.pods_with_affinity(required_anti_only=True) == []
    assert [p.name for p, _ in cache.pods_with_affinity()] == ["p2"]
