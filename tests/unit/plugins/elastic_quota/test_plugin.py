"""ElasticQuota's PreFilter through the simulator (the daemon's loop and the default
profile): max, gangs charged whole, a quota's problem, the non-preemptible rule, and the
requeue when the tenant's pods leave."""

from __future__ import annotations

import dataclasses

from gpusched.config import builtin_profile
from gpusched.core.queue import ClusterEvent
from gpusched.core.schedule_one import Result
from gpusched.framework.status import Code
from gpusched.framework.tenancy import StaticTenancy, TenantQuota
from gpusched.model import quota
from gpusched.model.pod import Gang, GangAPI, PodInfo, PodRequest
from gpusched.plugins import default_registry
from gpusched.sim.engine import Simulation
from tests.builders import gpu_node

GiB = 2**30


def gpus(n: float) -> int:
    return int(n * 1000)


def limits(gpu: float | None = None, pods: int | None = None) -> quota.Limits:
    out: list[int | None] = list(quota.UNLIMITED)
    if gpu is not None:
        out[quota.INDEX[quota.GPU]] = gpus(gpu)
    if pods is not None:
        out[quota.INDEX[quota.PODS]] = pods
    return tuple(out)


def sim(tenancy: StaticTenancy, nodes: int = 2) -> Simulation:
    reg = default_registry()
    return Simulation(
        [gpu_node(f"n{i}") for i in range(nodes)],
        builtin_profile("ai-scheduler", reg),
        reg,
        seed=1,
        tenancy=tenancy,
    )


def gpu_pod(name: str, ns: str, cards: int = 0, milli: int = 0, **kw: object) -> PodInfo:
    return PodInfo(
        uid=f"uid-{ns}-{name}",
        namespace=ns,
        name=name,
        request=PodRequest(cpu_milli=100, memory_bytes=GiB, gpu_cards=cards, gpu_milli=milli),
        scheduler_name="ai-scheduler",
        **kw,  # type: ignore[arg-type]
    )


def test_max_is_a_ceiling_with_a_message_in_words() -> None:
    tenancy = StaticTenancy([TenantQuota("team-a", "team-a/quota", max=limits(gpu=8))])
    s = sim(tenancy)
    assert s.submit(gpu_pod("a", "team-a", cards=6)).result is Result.SCHEDULED
    d = s.submit(gpu_pod("b", "team-a", cards=4))
    assert d.result is Result.UNSCHEDULABLE
    assert d.status.code is Code.UNSCHEDULABLE and d.status.plugin == "ElasticQuota"
    assert d.message == (
        "0/2 nodes are available: ElasticQuota team-a/quota: nvidia.com/gpu would be 10 GPUs,"
        " max 8 GPUs (used 6 GPUs, this pod 4 GPUs)."
    )
    # Up to the max is fine, and a share counts as its fraction.
    assert s.submit(gpu_pod("c", "team-a", cards=2)).result is Result.SCHEDULED
    assert s.submit(gpu_pod("d", "team-a", milli=250)).result is Result.UNSCHEDULABLE
    # Another tenant is not limited by it.
    assert s.submit(gpu_pod("e", "team-b", cards=4)).result is Result.SCHEDULED


def test_a_namespace_label_makes_one_tenant_of_several_namespaces() -> None:
    tenancy = StaticTenancy(
        [TenantQuota("ml", "ml-1/quota", max=limits(gpu=4))],
        namespace_tenants={"ml-1": "ml", "ml-2": "ml"},
    )
    s = sim(tenancy)
    assert s.submit(gpu_pod("a", "ml-1", cards=3)).result is Result.SCHEDULED
    d = s.submit(gpu_pod("b", "ml-2", cards=2))
    assert d.result is Result.UNSCHEDULABLE
    assert "used 3 GPUs, this pod 2 GPUs" in d.message


def test_a_refused_pod_comes_back_when_its_tenant_frees_quota() -> None:
    tenancy = StaticTenancy(
        [TenantQuota("ml", "ml-1/quota", max=limits(gpu=4))],
        namespace_tenants={"ml-1": "ml", "ml-2": "ml"},
    )
    s = sim(tenancy)
    first = gpu_pod("a", "ml-1", cards=4)
    assert s.submit(first).result is Result.SCHEDULED
    other = gpu_pod("o", "team-b", cards=1)
    assert s.submit(other).result is Result.SCHEDULED
    waiting = gpu_pod("b", "ml-2", cards=2)
    assert s.submit(waiting).result is Result.UNSCHEDULABLE
    s.advance(s.clock() + 20)  # past its backoff
    # Another tenant's pod leaving does not wake it; its own tenant's does.
    s.delete(other.uid)
    assert s.queue.where(waiting.uid) == "unschedulable"
    s.delete(first.uid)
    s.run()
    assert s.cache.get(waiting.uid) is not None


def test_a_gang_is_charged_whole_until_its_minimum_is_placed() -> None:
    tenancy = StaticTenancy([TenantQuota("team-a", "team-a/quota", max=limits(gpu=12))])
    s = sim(tenancy)
    gang = Gang("team-a/train", 4, GangAPI.ANNOTATIONS)
    members = [gpu_pod(f"w{i}", "team-a", cards=4, gang=gang) for i in range(4)]
    decisions = [s.arrive(m) for m in members]
    last = decisions[-1]
    assert last is not None and last.result is Result.UNSCHEDULABLE
    assert last.status.plugin == "ElasticQuota"
    assert (
        "nvidia.com/gpu would be 16 GPUs, max 12 GPUs (used 0 GPUs, gang team-a/train's"
        " 4 unplaced pods 16 GPUs)" in last.message
    )
    assert not any(s.cache.get(m.uid) for m in members)  # none holds a card
    # A gang that fits is placed whole.
    tenancy.put(TenantQuota("team-a", "team-a/quota", max=limits(gpu=16)))
    s.queue.move_all(ClusterEvent.QUOTA_CHANGE)
    s.advance(s.clock() + 20)
    assert all(s.cache.get(m.uid) for m in members)


def test_a_quota_with_a_problem_refuses_its_tenants_pods_unresolvably() -> None:
    problem = "tenant 'ml' has 2 ElasticQuotas (ml-1/a, ml-2/b): a tenant has one"
    tenancy = StaticTenancy([TenantQuota("team-a", "team-a/a", problem=problem)])
    s = sim(tenancy)
    d = s.submit(gpu_pod("a", "team-a", cards=1))
    assert d.status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert d.message == f"0/2 nodes are available: ElasticQuota team-a/a: {problem}."
    assert s.submit(gpu_pod("b", "team-b", cards=1)).result is Result.SCHEDULED


def test_a_non_preemptible_pod_may_not_borrow() -> None:
    tenancy = StaticTenancy(
        [
            TenantQuota("team-a", "team-a/quota", min=limits(gpu=4), max=limits(gpu=16)),
            TenantQuota("team-b", "team-b/quota", min=limits(gpu=4)),
        ]
    )
    s = sim(tenancy)
    pinned = dataclasses.replace(gpu_pod("a", "team-a", cards=4), preemptible=False)
    assert s.submit(pinned).result is Result.SCHEDULED
    more = dataclasses.replace(gpu_pod("b", "team-a", cards=1), preemptible=False)
    d = s.submit(more)
    assert d.result is Result.UNSCHEDULABLE
    assert (
        'ElasticQuota team-a/quota: a pod with gpusched.io/preemptible: "false" is never'
        " preempted, so it may only use its tenant's guaranteed minimum: nvidia.com/gpu would"
        " be 5 GPUs, guaranteed min 4 GPUs (used 4 GPUs, this pod 1 GPU)" in d.message
    )
    # A preemptible pod borrows above the min, up to the max.
    assert s.submit(gpu_pod("c", "team-a", cards=8)).result is Result.SCHEDULED
    # A tenant without an ElasticQuota has no guarantee to stay within.
    d = s.submit(dataclasses.replace(gpu_pod("x", "team-c", cards=1), preemptible=False))
    assert d.result is Result.UNSCHEDULABLE
    assert "tenant 'team-c' has no ElasticQuota" in d.message
    # A CPU-only non-preemptible pod asks for nothing any min guarantees.
    cpu = dataclasses.replace(gpu_pod("cpu", "team-c"), preemptible=False)
    assert s.submit(cpu).result is Result.SCHEDULED


def test_mins_above_the_cluster_are_scaled_for_the_non_preemptible_rule() -> None:
    # 16 GPUs in the cluster, 32 guaranteed: each min counts half.
    tenancy = StaticTenancy(
        [
            TenantQuota("team-a", "team-a/quota", min=limits(gpu=16)),
            TenantQuota("team-b", "team-b/quota", min=limits(gpu=16)),
        ]
    )
    s = sim(tenancy)
    ok = dataclasses.replace(gpu_pod("a", "team-a", cards=8), preemptible=False)
    assert s.submit(ok).result is Result.SCHEDULED
    d = s.submit(dataclasses.replace(gpu_pod("b", "team-a", cards=1), preemptible=False))
    assert d.result is Result.UNSCHEDULABLE
    assert "guaranteed min 8 GPUs" in d.message
    assert "scaled down in proportion" in d.message


def test_no_quota_anywhere_admits_everything() -> None:
    s = sim(StaticTenancy())
    pinned = dataclasses.replace(gpu_pod("a", "team-a", cards=8), preemptible=False)
    assert s.submit(pinned).result is Result.SCHEDULED
