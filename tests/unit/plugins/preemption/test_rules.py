"""Preemption's rules around the choice: the room a nomination holds, waiting for
terminating victims, victims at Permit, the writes' all-or-nothing for gangs, upstream
disruptionMode, and the lost-work arithmetic."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

from gpusched.config import builtin_profile, load_config
from gpusched.core.cache.cache import ClusterCache
from gpusched.core.cache.snapshot import Snapshot
from gpusched.core.handle import SchedulerHandle
from gpusched.core.schedule_one import Result
from gpusched.framework.disruption import Budget
from gpusched.framework.gangs import PodGroupSpec, StaticGangs
from gpusched.framework.status import Code, Status
from gpusched.model import keys
from gpusched.model.keys import RACK_LABEL
from gpusched.model.lost_work import lost_gpu_hours, lost_seconds
from gpusched.model.pod import Gang, GangAPI, PodInfo
from gpusched.plugins import default_registry
from gpusched.plugins.preemption.plugin import TERMINATING, Preemption
from gpusched.sim.engine import Simulation
from tests.builders import gpu_node
from tests.fakes import FakeCluster
from tests.unit.plugins.preemption.test_preemption import (
    _gang,
    _place,
    _pod,
    _sim,
    _victims,
)


def _plugin(s: object) -> Preemption:
    fw = s.fw  # type: ignore[attr-defined]
    return next(p for p in fw.post_filter if isinstance(p, Preemption))


def test_the_nominated_node_keeps_its_room_for_the_preemptor() -> None:
    s = _sim("n0")
    _place(s, _pod("v", 8), 0.0)
    s.advance(100.0)
    d = s.submit(_pod("hp", 8, prio=100))
    assert d.nominated == "n0" and _victims(s) == ["v"]
    # hp is backing off; a lower-priority pod that would fit the freed node is refused it.
    low = s.submit(_pod("low", 8, prio=50))
    assert low.result is Result.UNSCHEDULABLE
    # kube's words: its filters ran with the nominated pod added to the node
    assert low.message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    s.advance(200.0)
    assert s.cache.get("uid-hp") is not None  # the preemptor got its node
    assert _plugin(s).nominations == {}  # and gave up the nomination at Reserve


def test_a_nominated_pod_waits_for_its_terminating_victims() -> None:
    s = _sim("n0")
    _place(s, _pod("v", 8), 0.0)
    calls: list[str] = []

    async def slow_evict(victim: PodInfo, *, preemptor: PodInfo, node: str, message: str) -> Status:
        # The API marks the pod terminating; it is gone only after its grace period.
        calls.append(victim.name)
        s.events.pod_changed(dataclasses.replace(s.cluster.bound[victim.uid], deleting=True))
        return Status()

    s.cluster.evict = slow_evict  # type: ignore[method-assign]
    s.advance(100.0)
    s.submit(_pod("hp", 8, prio=100))
    assert calls == ["v"]
    plugin = _plugin(s)
    plugin.evicting.clear()  # even without its own record, the deletion timestamp counts
    s.advance(200.0)  # hp retried: v still terminating
    assert calls == ["v"]
    assert plugin._terminating(_pod("hp", 8, prio=100))
    assert TERMINATING.startswith("not eligible")


def test_a_victim_waiting_at_permit_is_rejected_not_evicted() -> None:
    # Gang g (2 x 4 cards): g0 placed on n2 and waiting at Permit for g1 (gated); it has
    # not started, so it loses nothing and is the cheapest victim: rejected at Permit, no
    # eviction written.
    s = _sim("n0", "n1", "n2")
    _place(s, _pod("x0", 8), 0.0)
    _place(s, _pod("x1", 8), 0.0)
    g1 = dataclasses.replace(_gang("g1", "g", 2, 4), scheduling_gates=("hold",))
    assert s.arrive(g1) is None
    d = s.arrive(_gang("g0", "g", 2, 4))
    assert d is not None and d.result is Result.WAITING
    s.advance(100.0)
    s.submit(_pod("hp", 8, prio=100))
    assert s.evictions == []
    assert s.cache.get("uid-g0") is None  # released
    s.advance(200.0)
    hp = s.cache.get("uid-hp")
    assert hp is not None and hp.node == d.node


def test_upstream_disruption_mode_pod_lets_a_member_go_alone() -> None:
    def run(mode: str) -> list[str]:
        gangs = StaticGangs([PodGroupSpec("ns/w", GangAPI.WORKLOAD, 2, disruption_mode=mode)])
        reg = default_registry()
        nodes = [gpu_node(n, rack="r0") for n in ("n0", "n1", "n2")]
        s = Simulation(nodes, builtin_profile("ai-scheduler", reg), reg, seed=1, gangs=gangs)
        _place(s, _pod("x", 8), 0.0)
        s.advance(2000.0)
        for m in ("w0", "w1"):
            s.arrive(dataclasses.replace(_pod(m, 8), gang=Gang("ns/w", 0, GangAPI.WORKLOAD)))
        s.advance(3000.0)
        s.submit(_pod("hp", 8, prio=100))
        return _victims(s)

    # x lost 8 x 3000 GPU-s; one member 8 x 1000, the gang 16 x 1000.
    assert run("Pod") in (["w0"], ["w1"])
    assert run("PodGroup") == ["w0", "w1"]


class _Port:
    def __init__(self, fail: set[str]) -> None:
        self.fail = fail
        self.calls: list[str] = []

    def budgets_of(self, pod: PodInfo) -> Sequence[Budget]:
        return ()

    async def evict(
        self, victim: PodInfo, *, preemptor: PodInfo, node: str, message: str
    ) -> Status:
        self.calls.append(victim.name)
        if victim.name in self.fail:
            return Status(Code.ERROR, ("boom",))
        return Status()

    async def nominate(self, pod: PodInfo, node: str) -> Status:
        self.calls.append(f"nominate {pod.name} {node}")
        return Status()


def _writes(fail: set[str]) -> list[str]:
    port = _Port(fail)
    handle = SchedulerHandle(ClusterCache(Snapshot()), FakeCluster(), lambda: 0.0, disruption=port)
    plugin = Preemption(None, handle)
    hp = _pod("hp", 8, prio=100)
    gang = (_pod("a", 1), _pod("b", 1), _pod("c", 1))
    lone = (_pod("z", 1),)
    asyncio.run(plugin._write(hp, [(hp, "n0")], [gang, lone], "n0", "m"))
    return port.calls


def test_a_gang_whose_first_eviction_fails_keeps_every_member() -> None:
    # ... and the nomination is given back: the room will not come.
    assert _writes({"a"}) == ["nominate hp n0", "a", "z", "nominate hp "]


def test_once_a_member_is_gone_the_rest_of_its_gang_goes_too() -> None:
    assert _writes({"b"}) == ["nominate hp n0", "a", "b", "c", "z"]


def test_lost_work_clamps_the_checkpoint_and_uses_the_interval() -> None:
    base = dataclasses.replace(_pod("p", 2), start_time=1000.0)
    assert lost_seconds(base, 4600.0) == 3600.0
    assert lost_gpu_hours(base, 4600.0) == 2.0
    ann = {keys.LAST_CHECKPOINT: "1970-01-01T01:00:00Z"}  # t=3600
    assert lost_seconds(dataclasses.replace(base, annotations=ann), 4600.0) == 1000.0
    lie = {keys.LAST_CHECKPOINT: "2999-01-01T00:00:00Z"}  # in the future: clamped to now
    assert lost_seconds(dataclasses.replace(base, annotations=lie), 4600.0) == 0.0
    early = {keys.LAST_CHECKPOINT: "1970-01-01T00:00:01Z"}  # before the start: since start
    assert lost_seconds(dataclasses.replace(base, annotations=early), 4600.0) == 3600.0
    every = {keys.CHECKPOINT_INTERVAL: "1000"}
    assert lost_seconds(dataclasses.replace(base, annotations=every), 4600.0) == 600.0
    assert lost_seconds(dataclasses.replace(base, start_time=0.0), 4600.0) == 0.0


def test_a_deleted_preemptor_gives_its_room_back() -> None:
    s = _sim("n0")
    _place(s, _pod("v", 8), 0.0)
    s.advance(100.0)
    assert s.submit(_pod("hp", 8, prio=100)).nominated == "n0"
    s.withdraw("uid-hp")  # deleted while backing off
    low = s.submit(_pod("low", 8, prio=50))
    assert low.result is Result.SCHEDULED and low.node == "n0"
    assert _plugin(s).nominations == {}


def test_a_nomination_expires() -> None:
    s = _sim("n0")
    _place(s, _pod("v", 8), 0.0)
    s.advance(100.0)
    assert s.submit(_pod("hp", 8, prio=100)).nominated == "n0"
    plugin = _plugin(s)
    plugin._purge()
    assert set(plugin.nominations) == {"uid-hp"}  # pending (backing off), not expired
    plugin.nominations["uid-hp"].since = -1000.0  # older than nominationTimeoutSeconds
    plugin._purge()
    assert plugin.nominations == {}


def test_a_node_short_of_an_extended_resource_even_after_evicting_is_not_chosen() -> None:
    # n0: x (8 cards, young: cheap) and z (priority 200, no GPU) holding n0's one HCA;
    # n1: y (8 cards, older: dearer), its HCA free. The preemptor needs 8 cards and an HCA:
    # evicting x would free the cards but not the HCA, so y goes.
    hca = "example.com/hca"
    nodes = [
        dataclasses.replace(gpu_node(n, rack=f"r{n}"), other=((hca, 1),)) for n in ("n0", "n1")
    ]
    reg = default_registry()
    s = Simulation(nodes, builtin_profile("ai-scheduler", reg), reg, seed=1)

    def needs_hca(p: PodInfo) -> PodInfo:
        return dataclasses.replace(p, request=dataclasses.replace(p.request, other=((hca, 1),)))

    _place(s, _pod("y", 8), 0.0)  # n0 or n1; the rest follows where it went
    y_node = s.cache.get("uid-y").node  # type: ignore[union-attr]
    other = "n1" if y_node == "n0" else "n0"
    z = dataclasses.replace(
        needs_hca(_pod("z", 0, prio=200)), node_selector={RACK_LABEL: f"r{other}"}
    )
    _place(s, z, 10.0)
    _place(s, _pod("x", 8), 2000.0)
    s.advance(3000.0)
    s.submit(needs_hca(_pod("hp", 8, prio=100)))
    assert _victims(s) == ["y"]


def test_a_nominated_pod_that_finds_no_victims_any_more_loses_its_nomination() -> None:
    s = _sim("n0")
    _place(s, _pod("v", 8), 0.0)
    s.advance(100.0)
    assert s.submit(_pod("hp", 8, prio=100)).nominated == "n0"
    # Before hp binds, a higher-priority pod takes the node and cannot be preempted by it.
    top = s.submit(_pod("top", 8, prio=1000))
    assert top.result is Result.SCHEDULED and top.node == "n0"
    s.advance(200.0)  # hp retried: no victims now
    assert _plugin(s).nominations == {}
    assert s.cluster.nominated == {}  # status.nominatedNodeName cleared


def test_kube_default_evicts_a_pdb_protected_pod_when_nothing_else_makes_room() -> None:
    # kube-scheduler's PDBs are best effort: the fewest violations, not none.
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
    s = Simulation([gpu_node("n0")], load_config(doc, reg).profiles[0], reg, seed=1)
    _place(s, _pod("db", 8), 0.0)
    s.cluster.budgets.append((Budget("ns/db", 0), lambda p: p.name == "db"))
    s.advance(100.0)
    s.submit(_pod("hp", 8, prio=100))
    assert _victims(s) == ["db"]


def test_a_nomination_from_an_earlier_leader_is_honoured_once_and_not_revived() -> None:
    """A new leader starts with no nominations of its own: a pod whose status names a
    nominated node (an earlier leader's preemption) goes there when it fits, as kube's
    nominator restores it from the pod; a nomination this instance gave up is not taken
    back from the pod's stale status."""
    natural = _sim("n0", "n1").submit(_pod("p", 2))
    assert natural.result is Result.SCHEDULED
    other = "n1" if natural.node == "n0" else "n0"
    s = _sim("n0", "n1")
    d = s.submit(_pod("p", 2, nominated_node=other))
    assert (d.result, d.node) == (Result.SCHEDULED, other)
    assert _plugin(s).nominations == {}  # placed: the adopted nomination ended at Reserve
    s2 = _sim("n0", "n1")
    _plugin(s2)._nominated_here.add("uid-p")  # held here once, then given up
    d2 = s2.submit(_pod("p", 2, nominated_node=other))
    assert d2.node == natural.node
