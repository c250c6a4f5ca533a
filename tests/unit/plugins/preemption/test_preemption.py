"""Preemption in the simulator (the daemon's framework, cache and cycles over an in-memory
cluster): which victims go, hand-computed; gangs whole or not at all; the rules that keep a
pod from preempting or from being a victim."""

from __future__ import annotations

import dataclasses

from gpusched.config import builtin_profile, load_config
from gpusched.core.schedule_one import Result
from gpusched.framework.disruption import Budget
from gpusched.framework.tenancy import StaticTenancy, TenantQuota
from gpusched.model import keys, quota
from gpusched.model.pod import Gang, GangAPI, PodInfo, PodRequest
from gpusched.plugins import default_registry
from gpusched.sim.engine import Simulation
from tests.builders import GiB, gpu_node

HOUR = 3600.0


def _pod(name: str, cards: int, prio: int = 0, ns: str = "ns", **kw: object) -> PodInfo:
    return PodInfo(
        uid=f"uid-{name}",
        namespace=ns,
        name=name,
        request=PodRequest(cpu_milli=1000, memory_bytes=GiB, gpu_cards=cards),
        scheduler_name="ai-scheduler",
        priority=prio,
        **kw,  # type: ignore[arg-type]
    )


def _sim(*names: str, cards: int = 8, tenancy: StaticTenancy | None = None) -> Simulation:
    reg = default_registry()
    nodes = [gpu_node(n, cards=cards, rack="r0") for n in names]
    kw = {"tenancy": tenancy} if tenancy is not None else {}
    return Simulation(nodes, builtin_profile("ai-scheduler", reg), reg, seed=1, **kw)  # type: ignore[arg-type]


def _place(s: Simulation, pod: PodInfo, at: float) -> None:
    s.advance(at)
    d = s.submit(pod)
    assert d.result is Result.SCHEDULED, d.message


def _victims(s: Simulation) -> list[str]:
    return sorted(e.victim.name for e in s.evictions)


def test_the_high_priority_pod_evicts_the_set_that_loses_the_fewest_gpu_hours() -> None:
    # n0: a (4 cards, started t=0) and b (4 cards, t=1000, checkpointed at t=2500);
    # n1: c (2 cards, t=500) and d (6 cards, t=2000). At t=3000 an 8-card pod needs a whole
    # node. Losses: a 4*3000, b 4*500 -> n0 costs 14000 GPU-s; c 2*2500, d 6*1000 ->
    # n1 costs 11000 GPU-s. n1 wins: c and d go, 11000/3600 GPU-hours lost.
    s = _sim("n0", "n1")
    _place(s, _pod("a", 4), 0.0)
    _place(s, _pod("c", 2), 500.0)
    _place(s, _pod("b", 4), 1000.0)
    _place(s, _pod("d", 6), 2000.0)
    b_ckpt = "1970-01-01T00:41:40Z"  # t=2500
    s.events.pod_changed(
        dataclasses.replace(
            s.cache.get("uid-b").pod,  # type: ignore[union-attr]
            annotations={**s.cache.get("uid-b").pod.annotations, keys.LAST_CHECKPOINT: b_ckpt},  # type: ignore[union-attr]
        )
    )
    s.advance(3000.0)
    d = s.submit(_pod("hp", 8, prio=100))
    assert d.nominated == "n1"
    assert _victims(s) == ["c", "d"]
    assert s.preempted_gpu_hours == (2 * 2500 + 6 * 1000) / HOUR
    assert s.cluster.nominated == {"uid-hp": "n1"}
    s.advance(3100.0)  # backoff over: the preemptor binds where it was nominated
    entry = s.cache.get("uid-hp")
    assert entry is not None and entry.node == "n1"


def test_kube_default_takes_the_lowest_priority_and_ignores_lost_work() -> None:
    reg = default_registry()

    doc = {
        "apiVersion": "gpusched.io/v1alpha1",
        "kind": "GpuSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "ai-scheduler",
                "pluginConfig": [{"name": "Preemption", "args": {"strategy": "KubeDefault"}}],
            }
        ],
    }
    profile = load_config(doc, reg).profiles[0]
    s = Simulation([gpu_node("n0"), gpu_node("n1")], profile, reg, seed=1)
    _place(s, _pod("old", 8, prio=1), 0.0)  # n0 or n1: 8 cards, priority 1, long run
    _place(s, _pod("new", 8, prio=0), 3000.0)  # the other node, priority 0, short run
    s.advance(3100.0)
    s.submit(_pod("hp", 8, prio=100))
    assert _victims(s) == ["new"]  # kube: the lowest priority, whatever it loses


def test_non_preemptible_pdb_protected_and_never_policy() -> None:
    s = _sim("n0", "n1")
    keep = {keys.PREEMPTIBLE: "false"}
    _place(s, _pod("cheap-but-keep", 8, annotations=keep, preemptible=False), 2000.0)
    _place(s, _pod("pdb", 8, labels={"app": "db"}), 2500.0)
    s.cluster.budgets.append((Budget("ns/db", 0), lambda p: p.labels.get("app") == "db"))
    s.advance(3000.0)
    never = _pod("never", 8, prio=100, preemption_policy="Never")
    d = s.submit(never)
    assert d.result is Result.UNSCHEDULABLE and s.evictions == []
    d = s.submit(_pod("hp", 8, prio=100))
    assert d.nominated is None and s.evictions == []
    # The budget allows one now: the PDB-protected pod is the only possible victim.
    s.cluster.budgets[0] = (Budget("ns/db", 1), s.cluster.budgets[0][1])
    s.advance(3500.0)
    s.queue.flush()
    s.submit(_pod("hp2", 8, prio=100))
    assert _victims(s) == ["pdb"]


def test_min_run_seconds_protects_a_young_pod() -> None:
    reg = default_registry()

    doc = {
        "apiVersion": "gpusched.io/v1alpha1",
        "kind": "GpuSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "ai-scheduler",
                "pluginConfig": [{"name": "Preemption", "args": {"minRunSeconds": 600}}],
            }
        ],
    }
    s = Simulation([gpu_node("n0")], load_config(doc, reg).profiles[0], reg, seed=1)
    _place(s, _pod("young", 8), 1000.0)
    s.advance(1300.0)
    s.submit(_pod("hp", 8, prio=100))
    assert s.evictions == []
    s.advance(1700.0)  # 700 s old now: the retried preemptor may take it
    assert _victims(s) == ["young"]


def _gang(name: str, gang: str, size: int, cards: int) -> PodInfo:
    return dataclasses.replace(
        _pod(name, cards), gang=Gang(f"ns/{gang}", size, GangAPI.ANNOTATIONS)
    )


def test_a_gang_victim_goes_whole_and_costs_the_whole_gang() -> None:
    # Gang g (2 x 8 cards, n0+n1, started t=2000) vs lone pod x (8 cards on n2, t=0).
    # A 8-card pod at t=3000: evicting one g member frees a node but kills the gang:
    # cost 2*8*1000 = 16000 GPU-s > x's 8*3000 = 24000? No: 16000 < 24000, so g goes, whole.
    s = _sim("n0", "n1", "n2")
    _place(s, _pod("x", 8), 0.0)
    s.advance(2000.0)
    assert s.arrive(_gang("g0", "g", 2, 8)) is None
    d = s.arrive(_gang("g1", "g", 2, 8))
    assert d is not None and d.result is Result.SCHEDULED
    s.advance(3000.0)
    s.submit(_pod("hp", 8, prio=100))
    assert _victims(s) == ["g0", "g1"]
    assert s.preempted_gpu_hours == 16 * 1000 / HOUR


def test_a_gang_victim_with_one_protected_member_is_not_touched() -> None:
    s = _sim("n0", "n1", "n2")
    _place(s, _pod("x", 8), 2500.0)
    s.advance(0.0)
    keep = dataclasses.replace(
        _gang("g0", "g", 2, 8), annotations={keys.PREEMPTIBLE: "false"}, preemptible=False
    )
    assert s.arrive(keep) is None
    s.arrive(_gang("g1", "g", 2, 8))
    s.advance(3000.0)
    s.submit(_pod("hp", 8, prio=100))
    assert _victims(s) == ["x"]  # g1 alone would be cheaper per node, but not alone


def test_a_gang_preemptor_gets_room_for_every_member_or_evicts_nobody() -> None:
    # Three full nodes, a 2 x 8-card gang of priority 100 arrives: two victims go.
    s = _sim("n0", "n1", "n2")
    for i, t in enumerate((0.0, 1000.0, 2000.0)):
        _place(s, _pod(f"v{i}", 8), t)
    s.advance(3000.0)
    s.arrive(dataclasses.replace(_gang("h0", "h", 2, 8), priority=100))
    s.arrive(dataclasses.replace(_gang("h1", "h", 2, 8), priority=100))
    assert _victims(s) == ["v1", "v2"]  # the two youngest: least work lost
    assert set(s.cluster.nominated) == {"uid-h0", "uid-h1"}
    s.advance(3100.0)
    assert {s.cache.get("uid-h0").node, s.cache.get("uid-h1").node} == {"n1", "n2"}  # type: ignore[union-attr]


def test_a_gang_preemptor_that_cannot_get_all_its_room_evicts_nobody() -> None:
    s = _sim("n0", "n1", "n2")
    keep = {keys.PREEMPTIBLE: "false"}
    _place(s, _pod("v0", 8, annotations=keep, preemptible=False), 0.0)
    _place(s, _pod("v1", 8, annotations=keep, preemptible=False), 0.0)
    _place(s, _pod("v2", 8), 0.0)
    s.advance(3000.0)
    s.arrive(dataclasses.replace(_gang("h0", "h", 2, 8), priority=100))
    s.arrive(dataclasses.replace(_gang("h1", "h", 2, 8), priority=100))
    assert s.evictions == []  # one node could be freed, the gang needs two


def test_a_tenant_under_its_guarantee_is_not_preempted_by_another_and_reclaims() -> None:
    # Tenants a (min 8 GPUs) and b (min 0): b borrowed both nodes at priority 10. a's pod of
    # priority 0 reclaims one of b's nodes; b's priority-100 pod cannot take a's back.
    gpu = quota.INDEX[quota.GPU]
    mins: list[int | None] = [None] * len(quota.RESOURCES)
    mins[gpu] = 8000
    mins[quota.INDEX[quota.CPU]] = 64_000
    mins[quota.INDEX[quota.MEMORY]] = 512 * GiB
    tenancy = StaticTenancy([TenantQuota("a", "a/q", min=tuple(mins))])
    s = _sim("n0", "n1", tenancy=tenancy)
    _place(s, _pod("b0", 8, prio=10, ns="b"), 0.0)
    _place(s, _pod("b1", 8, prio=10, ns="b"), 1000.0)
    s.advance(2000.0)
    s.submit(_pod("a0", 8, prio=0, ns="a"))
    assert _victims(s) == ["b1"]
    s.advance(2100.0)
    assert s.cache.get("uid-a0") is not None
    s.submit(_pod("b2", 8, prio=100, ns="b"))
    assert _victims(s) == ["b0", "b1"]  # b evicts its own lower-priority b0, never a0
    s.advance(2200.0)
    assert s.cache.get("uid-a0") is not None
