"""The cache's per-namespace quota usage and Handle.tenant_usage over it."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.core.cache.cache import ClusterCache
from gpusched.core.handle import SchedulerHandle
from gpusched.framework import Allocation
from gpusched.framework.tenancy import StaticTenancy
from gpusched.model import quota
from gpusched.model.pod import PodInfo, PodRequest
from tests.builders import cache_with

GiB = 2**30


def _pod(name: str, namespace: str = "ns", **req: int) -> PodInfo:
    return PodInfo(f"uid-{name}", namespace, name, PodRequest(**req))  # type: ignore[arg-type]


def _bound(pod: PodInfo, node: str = "a") -> PodInfo:
    return replace(pod, node_name=node, phase="Running")


def _reference(c: ClusterCache, tenancy: StaticTenancy, tenant: str) -> quota.Usage:
    """The walk the index replaces: every pod in the cache whose namespace is the tenant's."""
    total = quota.ZERO
    for entry in c.allocations():
        if tenancy.tenant_of(entry.pod.namespace) == tenant:
            total = quota.add(total, quota.usage_of(entry.pod.request))
    return total


def test_bound_and_assumed_pods_count_per_namespace() -> None:
    c = cache_with("a")
    row = c.snapshot.row_of("a")
    whole = _pod("w", "team-a", cpu_milli=1000, memory_bytes=GiB, gpu_cards=2)
    share = _pod("s", "team-a", gpu_milli=250, gpu_mem_mib=20480)
    other = _pod("o", "team-b", cpu_milli=500)
    c.add_or_update_pod(_bound(whole))
    c.assume(share, Allocation("a", row, (3,), (250,), (20480,)))
    c.add_or_update_pod(_bound(other))
    usage = c.namespace_usage()
    assert usage["team-a"] == (2250, 20480, 1000, GiB, 2)
    assert usage["team-b"] == (0, 0, 500, 0, 1)


def test_forget_and_remove_give_back_exactly_and_drop_empty_namespaces() -> None:
    c = cache_with("a")
    row = c.snapshot.row_of("a")
    p = _pod("p", "team-a", gpu_cards=1)
    q = _pod("q", "team-a", gpu_cards=3)
    c.assume(p, Allocation("a", row, (0,), (1000,), (81920,)))
    c.add_or_update_pod(_bound(q))
    assert c.namespace_usage()["team-a"][0] == 4000
    assert c.forget(p.uid) is not None
    assert c.namespace_usage()["team-a"][0] == 3000
    c.remove_pod(q.uid)
    assert "team-a" not in c.namespace_usage()


def test_an_assumed_pod_confirmed_by_the_watch_is_charged_once() -> None:
    c = cache_with("a")
    row = c.snapshot.row_of("a")
    p = _pod("p", "team-a", gpu_cards=2)
    c.assume(p, Allocation("a", row, (0, 1), (1000, 1000), (81920, 81920)))
    c.add_or_update_pod(replace(_bound(p), gpu_ids=(0, 1)))
    assert c.namespace_usage()["team-a"] == (2000, 0, 0, 0, 1)


def test_an_in_place_resize_recharges_and_removal_returns_the_new_charge() -> None:
    c = cache_with("a")
    p = _bound(_pod("p", "team-a", cpu_milli=1000, memory_bytes=GiB))
    c.add_or_update_pod(p)
    grown = replace(p, request=PodRequest(cpu_milli=4000, memory_bytes=4 * GiB))
    c.add_or_update_pod(grown)
    assert c.namespace_usage()["team-a"] == (0, 0, 4000, 4 * GiB, 1)
    c.remove_pod(p.uid)  # the watch's deletion carries no request: the charge is the cache's
    assert c.namespace_usage() == {}


def test_a_finished_pod_stops_counting() -> None:
    c = cache_with("a")
    p = _bound(_pod("p", "team-a", gpu_cards=1))
    c.add_or_update_pod(p)
    c.add_or_update_pod(replace(p, phase="Succeeded"))
    assert c.namespace_usage() == {}


def test_usage_changed_names_the_namespace_on_each_change() -> None:
    c = cache_with("a")
    seen: list[str] = []
    c.usage_changed = seen.append
    p = _bound(_pod("p", "team-a", gpu_cards=1))
    c.add_or_update_pod(p)
    c.add_or_update_pod(replace(p, labels={"x": "y"}))  # nothing the quota counts
    c.remove_pod(p.uid)
    assert seen == ["team-a", "team-a"]


def test_tenant_usage_sums_the_tenants_namespaces() -> None:
    c = cache_with("a")
    tenancy = StaticTenancy(namespace_tenants={"ml-1": "ml", "ml-2": "ml"})
    handle = SchedulerHandle(c, None, lambda: 0.0, tenancy=tenancy)  # type: ignore[arg-type]
    c.add_or_update_pod(_bound(_pod("a1", "ml-1", gpu_cards=2)))
    c.add_or_update_pod(_bound(_pod("a2", "ml-2", gpu_cards=1)))
    c.add_or_update_pod(_bound(_pod("b", "team-b", gpu_cards=4)))
    assert handle.tenant_usage("ml")[0] == 3000
    assert handle.tenant_usage("team-b")[0] == 4000
    assert handle.tenant_usage("nobody") == quota.ZERO
    # A Namespace relabelled into another tenant takes its usage along at once.
    tenancy.set_tenant("ml-2", "team-b")
    assert handle.tenant_usage("ml")[0] == 2000
    assert handle.tenant_usage("team-b")[0] == 5000


_NAMESPACES = ("t1", "t2", "t3")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(("assume", "bind", "resize", "forget", "finish", "remove")),
            st.integers(0, 5),  # which pod
            st.integers(0, 4),  # cards asked
            st.integers(0, 3000),  # cpu asked
        ),
        max_size=40,
    )
)
def test_the_index_matches_a_full_walk_after_any_sequence(
    ops: list[tuple[str, int, int, int]],
) -> None:
    c = cache_with("a")
    row = c.snapshot.row_of("a")
    tenancy = StaticTenancy(namespace_tenants={"t1": "x", "t2": "x"})
    handle = SchedulerHandle(c, None, lambda: 0.0, tenancy=tenancy)  # type: ignore[arg-type]
    for op, i, cards, cpu in ops:
        p = _pod(f"p{i}", _NAMESPACES[i % 3], gpu_cards=cards, cpu_milli=cpu)
        have = c.get(p.uid)
        if op == "assume" and have is None:
            c.assume(p, Allocation("a", row, tuple(range(cards)), (1000,) * cards, (0,) * cards))
        elif op in ("bind", "resize") and (op == "bind" or have is not None):
            c.add_or_update_pod(_bound(p))
        elif op == "forget":
            c.forget(p.uid)
        elif op == "finish" and have is not None:
            c.add_or_update_pod(replace(_bound(have.pod), phase="Failed"))
        elif op == "remove":
            c.remove_pod(p.uid)
    for tenant in ("x", "t3"):
        assert handle.tenant_usage(tenant) == _reference(c, tenancy, tenant)
    assert all(u[quota.INDEX[quota.PODS]] > 0 for u in c.namespace_usage().values())
