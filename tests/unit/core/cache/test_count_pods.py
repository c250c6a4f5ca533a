"""ClusterCache.count_matching_pods over one namespace (PodTopologySpread's count): its
bound and assumed pods, per node, kept through adds, updates, a pod re-filed on another
node, forgets and removals."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from gpusched.core.cache.cache import ClusterCache
from gpusched.framework.interfaces import Allocation
from gpusched.model.pod import PodInfo
from tests.builders import node, pod, snapshot


def test_counts_follow_the_pods_of_one_namespace() -> None:
    cache = ClusterCache(snapshot(node("a"), node("b")))
    web = {"app": "web"}
    cache.add_or_update_pod(pod("w1", labels=web, node_name="a"))
    cache.add_or_update_pod(pod("w2", labels=web, node_name="a"))
    cache.add_or_update_pod(pod("db", labels={"app": "db"}, node_name="b"))
    cache.add_or_update_pod(replace(pod("x", labels=web, node_name="b"), namespace="other"))
    cache.assume(pod("w3", labels=web), Allocation("b", cache.snapshot.row_of("b")))

    @dataclass(frozen=True)
    class Web:
        """app=web pods of one namespace, found through the namespace (no anchor)."""

        ns: str
        anchor: None = None

        @property
        def namespaces(self) -> frozenset[str]:
            return frozenset((self.ns,))

        def matches(self, p: PodInfo) -> bool:
            return p.namespace == self.ns and p.labels.get("app") == "web"

    def count(ns: str) -> dict[str, int]:
        got = cache.count_matching_pods(Web(ns))
        return {cache.snapshot.names[r]: int(got[r]) for r in np.flatnonzero(got)}

    assert count("ns") == {"a": 2, "b": 1}
    assert count("other") == {"b": 1}
    assert count("nowhere") == {}
    # A relabel is seen (the entry keeps the latest pod); a uid seen on another node is
    # another pod in effect and is re-filed there.
    cache.add_or_update_pod(pod("w1", labels={"app": "db"}, node_name="a"))
    cache.add_or_update_pod(pod("w2", labels=web, node_name="b"))
    assert count("ns") == {"b": 2}
    cache.forget("uid-w3")
    cache.remove_pod("uid-w2")
    assert count("ns") == {}
    cache.remove_pod("uid-w1")
    cache.remove_pod("uid-db")
    assert cache._labels is not None
    assert "ns" not in cache._labels.by_ns  # no empty namespaces left behind
