"""ClusterCache.count_pods_by_node: a namespace's bound and assumed pods, per node, kept
through adds, updates, a pod re-filed on another node, forgets and removals."""

from __future__ import annotations

from dataclasses import replace

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

    def is_web(p: PodInfo) -> bool:
        return p.labels.get("app") == "web"

    assert cache.count_pods_by_node("ns", is_web) == {"a": 2, "b": 1}
    assert cache.count_pods_by_node("other", is_web) == {"b": 1}
    assert cache.count_pods_by_node("nowhere", is_web) == {}
    # A relabel is seen (the entry keeps the latest pod); a uid seen on another node is
    # another pod in effect and is re-filed there.
    cache.add_or_update_pod(pod("w1", labels={"app": "db"}, node_name="a"))
    cache.add_or_update_pod(pod("w2", labels=web, node_name="b"))
    assert cache.count_pods_by_node("ns", is_web) == {"b": 2}
    cache.forget("uid-w3")
    cache.remove_pod("uid-w2")
    assert cache.count_pods_by_node("ns", is_web) == {}
    cache.remove_pod("uid-w1")
    cache.remove_pod("uid-db")
    assert cache._labels is not None
    assert "ns" not in cache._labels.by_ns  # no empty namespaces left behind
