"""Dominant resource shares (plugins/helper/fair.py) over the cache's per-namespace usage."""

from __future__ import annotations

import math

import numpy as np

from gpusched.core.handle import SchedulerHandle
from gpusched.framework.interfaces import Allocation
from gpusched.framework.tenancy import StaticTenancy, TenantQuota
from gpusched.model import quota
from gpusched.model.pod import PodInfo, PodRequest
from gpusched.plugins.helper.fair import TenantShares, dominant_share
from tests.builders import GiB, cache_with
from tests.fakes import FakeCluster


def gpu_pod(name: str, ns: str, cards: int, cpu: int = 1000) -> PodInfo:
    return PodInfo(
        uid=f"{ns}/{name}",
        namespace=ns,
        name=name,
        request=PodRequest(cpu_milli=cpu, memory_bytes=GiB, gpu_cards=cards, gpu_mem_mib=81920),
    )


def place(h: SchedulerHandle, p: PodInfo, node: str, cards: tuple[int, ...]) -> None:
    row = h.cache.snapshot.row_of(node)
    h.cache.assume(p, Allocation(node, row, cards, (1000,) * len(cards), (81920,) * len(cards)))


def reference_usage(h: SchedulerHandle, tenant: str) -> quota.Usage:
    """Handle.tenant_usage's contract, walking every pod."""
    total = quota.ZERO
    for e in h.cache.allocations():
        if h.tenancy.tenant_of(e.pod.namespace) == tenant:
            total = quota.add(total, quota.usage_of(e.pod.request))
    return total


def test_share_against_the_guarantee_or_the_cluster() -> None:
    cap = (16000, 16 * 81920, 128_000, 1024 * GiB, 220)
    # Guaranteed 4 GPUs and 8 CPUs: 2 GPUs and 6 CPUs used -> cpu dominates, 0.75.
    mins = (4000, None, 8000, None, None)
    assert dominant_share((2000, 0, 6000, GiB, 3), mins, cap) == 0.75
    # No guarantee: classic DRF over the cluster (GPUs dominate: 8 of 16).
    assert dominant_share((8000, 0, 6000, GiB, 3), None, cap) == 0.5
    # Guaranteed none of a resource it uses: infinitely above its guarantee.
    assert math.isinf(dominant_share((1000, 0, 0, 0, 1), (0, None, None, None, None), cap))
    assert dominant_share(quota.ZERO, mins, cap) == 0.0


def test_shares_follow_placements_and_the_index_matches_a_walk() -> None:
    cache = cache_with("n1", "n2")  # 16 cards
    tenancy = StaticTenancy(
        [TenantQuota("team", "ns1/q", min=(4000, None, None, None, None))],
        {"ns1": "team", "ns2": "team"},
    )
    h = SchedulerHandle(cache, FakeCluster(), lambda: 0.0, tenancy=tenancy)
    assert TenantShares(h)(["team", "other"]) == {"team": 0.0, "other": 0.0}
    place(h, gpu_pod("a", "ns1", 2), "n1", (0, 1))
    place(h, gpu_pod("b", "ns2", 1), "n2", (0,))
    place(h, gpu_pod("c", "other", 4), "n2", (1, 2, 3, 4))
    shares = TenantShares(h)(["team", "other"])
    assert shares == {"team": 0.75, "other": 0.25}  # 3 of 4 guaranteed; 4 of 16 cards
    for t in ("team", "other"):
        assert h.tenant_usage(t) == reference_usage(h, t) == h.tenant_usages()[t]
    rows = h.tenant_gpu_rows("team")
    assert rows[cache.snapshot.row_of("n1")] == 2000
    assert rows[cache.snapshot.row_of("n2")] == 1000
    # A pod that leaves gives its usage back; a node that goes takes its rows' load along
    # (its pods still count against their tenants' quota: they are bound).
    cache.forget("ns1/a")
    assert TenantShares(h)(["team"])["team"] == 0.25
    assert not np.any(h.tenant_gpu_rows("team")[cache.snapshot.row_of("n1")])
    cache.remove_node("n2")
    assert not np.any(h.tenant_gpu_rows("other"))
    assert not np.any(h.tenant_gpu_rows("team"))
