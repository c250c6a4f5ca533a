"""The tenant quota rules shared by ElasticQuota and Preemption (plugins/helper/quota.py)."""

from __future__ import annotations

from typing import cast

from gpusched.framework.interfaces import Handle
from gpusched.framework.tenancy import TenantQuota
from gpusched.model import quota
from gpusched.plugins.helper.quota import QuotaState, effective_mins, oversubscribed

GPU = quota.INDEX[quota.GPU]


def limits(**amounts: int) -> quota.Limits:
    out: list[int | None] = list(quota.UNLIMITED)
    for name, amount in amounts.items():
        out[quota.INDEX[{"gpu": quota.GPU, "cpu": quota.CPU, "pods": quota.PODS}[name]]] = amount
    return tuple(out)


def usage(gpu: int = 0, cpu: int = 0, pods: int = 0) -> quota.Usage:
    return (gpu, 0, cpu, 0, pods)


CAP = usage(gpu=16_000, cpu=64_000, pods=100)


def test_mins_within_the_cluster_are_kept_and_unnamed_resources_stay_unguaranteed() -> None:
    mins = effective_mins(
        [
            TenantQuota("a", "a/q", min=limits(gpu=8000)),
            TenantQuota("b", "b/q", min=limits(gpu=8000)),
        ],
        CAP,
    )
    assert mins["a"][GPU] == 8000 and mins["b"][GPU] == 8000
    assert mins["a"][quota.INDEX[quota.CPU]] is None
    assert oversubscribed([TenantQuota("a", "a/q", min=limits(gpu=8000))], CAP) == []


def test_mins_above_the_cluster_are_scaled_in_proportion_never_adding_up_to_more() -> None:
    quotas = [
        TenantQuota("a", "a/q", min=limits(gpu=16_000)),
        TenantQuota("b", "b/q", min=limits(gpu=8000)),
        TenantQuota("bad", "x/q", min=limits(gpu=99_000), problem="broken"),  # not counted
    ]
    mins = effective_mins(quotas, CAP)
    assert mins["a"][GPU] == 10_666 and mins["b"][GPU] == 5333
    assert sum(m[GPU] or 0 for m in mins.values()) <= CAP[GPU]
    assert "bad" not in mins
    assert oversubscribed(quotas, CAP) == [quota.GPU]


def state(**mins: quota.Limits) -> QuotaState:
    return QuotaState(cast(Handle, None), mins, {})


def test_a_gpu_guarantee_reclaims_for_a_pod_that_also_asks_for_cpu() -> None:
    qs = state(a=limits(gpu=8000))
    request = usage(gpu=4000, cpu=100, pods=1)
    assert qs.within_min("a", usage(gpu=8000, cpu=900, pods=3), request)
    assert not qs.within_min("a", usage(gpu=8001, cpu=900, pods=3), request)


def test_no_guarantee_of_what_the_pod_asks_for_reclaims_nothing() -> None:
    qs = state(a=limits(cpu=4000))
    assert not qs.within_min("a", usage(gpu=1000), usage(gpu=1000, pods=1))
    assert qs.within_min("a", usage(cpu=1000), usage(cpu=1000, pods=1))
    assert not qs.within_min("nobody", usage(gpu=1000), usage(gpu=1000, pods=1))


def test_a_named_pod_count_is_a_guarantee_like_any_other() -> None:
    qs = state(a=limits(gpu=8000, pods=2))
    assert not qs.within_min("a", usage(gpu=2000, pods=3), usage(gpu=1000, pods=1))


def test_over_min_is_borrowing_in_a_named_resource_or_anything_without_a_quota() -> None:
    qs = state(a=limits(gpu=8000))
    assert not qs.over_min("a", usage(gpu=8000, cpu=10**6, pods=50))
    assert qs.over_min("a", usage(gpu=8001))
    assert qs.over_min("nobody", usage(cpu=1))
    assert not qs.over_min("nobody", usage(pods=3))
