"""GangScheduling through the real framework, queue and cache (the simulator's loop): all or
nothing, the fewest racks, no deadlock, timeouts and sibling release, the starvation bound."""

from __future__ import annotations

import dataclasses

import numpy as np

from gpusched.config.load import builtin_profile
from gpusched.framework import CycleState
from gpusched.framework.gangs import PodGroupSpec, StaticGangs
from gpusched.model import keys
from gpusched.model.node import NodeModel, Taint
from gpusched.model.pod import Gang, GangAPI, PodInfo, PodRequest
from gpusched.plugins import default_registry
from gpusched.plugins.gang_scheduling import GangScheduling
from gpusched.plugins.gang_scheduling.args import GangSchedulingArgs
from gpusched.sim.engine import Simulation
from tests.builders import GiB, gpu_node


def rack_nodes(racks: int, per_rack: int, cards: int = 8, spines: int = 1) -> list[NodeModel]:
    out = []
    for r in range(racks):
        spine = f"s{r * spines // racks}"
        for i in range(per_rack):
            n = gpu_node(f"r{r}-n{i}", cards=cards, rack=f"r{r}")
            out.append(
                dataclasses.replace(n, spine=spine, labels={**n.labels, keys.SPINE_LABEL: spine})
            )
    return out


def sim(nodes: list[NodeModel], *groups: PodGroupSpec, **args: float) -> Simulation:
    reg = default_registry()
    profile = builtin_profile("ai-scheduler", reg)
    if args:
        profile = dataclasses.replace(
            profile,
            plugin_args={**profile.plugin_args, "GangScheduling": GangSchedulingArgs(**args)},
        )
    return Simulation(nodes, profile, reg, seed=1, gangs=StaticGangs(groups))


_t = [0.0]


def member(
    gang: str,
    i: int,
    total: int = 0,
    *,
    cards: int = 8,
    api: GangAPI = GangAPI.ANNOTATIONS,
    **kw: object,
) -> PodInfo:
    _t[0] += 1.0
    return PodInfo(
        uid=f"uid-{gang}-{i}",
        namespace="ns",
        name=f"{gang}-{i}",
        request=PodRequest(cpu_milli=1000, memory_bytes=GiB, gpu_cards=cards),
        scheduler_name="ai-scheduler",
        created=_t[0],
        gang=Gang(f"ns/{gang}", total if api is GangAPI.ANNOTATIONS else 0, api),
        **kw,  # type: ignore[arg-type]
    )


def arrive(s: Simulation, *pods: PodInfo) -> None:
    assert s.events is not None
    for p in pods:
        s.events.pod_changed(p)
    s.run()


def placed(s: Simulation, gang: str) -> dict[str, str]:
    """pod name -> node, for the gang's pods the cache holds (bound or assumed)."""
    out = {}
    for uid, entry in s.cache.pods.items():
        if uid.startswith(f"uid-{gang}-"):
            out[entry.pod.name] = entry.node
    return out


def racks_of(s: Simulation, gang: str) -> set[str]:
    return {n.split("-")[0] for n in placed(s, gang).values()}


def gang_plugin(s: Simulation) -> GangScheduling:
    plugin = s.fw.plugins["GangScheduling"]
    assert isinstance(plugin, GangScheduling)
    return plugin


def test_members_wait_at_pre_enqueue_until_min_member_exist() -> None:
    s = sim(rack_nodes(2, 2))
    pods = [member("g", i, 4) for i in range(4)]
    arrive(s, *pods[:3])
    assert placed(s, "g") == {}
    assert all(s.queue.where(p.uid) == "gated" for p in pods[:3])
    arrive(s, pods[3])
    assert len(placed(s, "g")) == 4
    assert not any(s.cache.is_assumed(p.uid) for p in pods)  # all bound


def bound_elsewhere(name: str, node: str, cards: tuple[int, ...]) -> PodInfo:
    """A pod another scheduler bound: the cache charges its cards."""
    _t[0] += 1.0
    return PodInfo(
        uid=f"uid-x-{name}",
        namespace="ns",
        name=name,
        request=PodRequest(cpu_milli=1000, memory_bytes=GiB, gpu_cards=len(cards)),
        node_name=node,
        gpu_ids=cards,
        phase="Running",
        created=_t[0],
    )


def test_gang_goes_to_the_tightest_single_rack() -> None:
    # 4 racks x 2 nodes x 8 cards; r2 keeps 8 free cards, r3 keeps 12 (4 + 8). A gang of
    # 3 x 4 cards fits in r0, r1 (room for 4 such pods) and r3 (exactly 3): r3 is the best
    # fit; r2 holds only 2.
    s = sim(rack_nodes(4, 2))
    arrive(
        s,
        bound_elsewhere("x1", "r2-n0", tuple(range(8))),
        bound_elsewhere("x2", "r3-n0", (0, 1, 2, 3)),
    )
    pods = [member("g", i, 3, cards=4) for i in range(3)]
    arrive(s, *pods)
    assert len(placed(s, "g")) == 3
    assert racks_of(s, "g") == {"r3"}


def test_gang_that_cannot_fit_holds_nothing() -> None:
    s = sim(rack_nodes(2, 2))  # 4 nodes x 8 cards
    pods = [member("g", i, 5) for i in range(5)]
    arrive(s, *pods)
    assert placed(s, "g") == {}
    assert int(s.snapshot.card_free_milli[s.snapshot.node_valid].min()) == 1000
    d = s.queue.where(pods[0].uid)
    assert d == "unschedulable"


def test_two_gangs_of_sixty_percent_never_deadlock() -> None:
    # 5 nodes x 8 cards; each gang wants 3 nodes. Members arrive interleaved.
    s = sim(rack_nodes(1, 5))
    a = [member("a", i, 3) for i in range(3)]
    b = [member("b", i, 3) for i in range(3)]
    arrive(s, *[p for pair in zip(a, b, strict=True) for p in pair])
    got_a, got_b = placed(s, "a"), placed(s, "b")
    assert sorted([len(got_a), len(got_b)]) == [0, 3]
    winner, loser = (a, b) if got_a else (b, a)
    assert not s.fw.waiting.__len__()
    # The first finishes: the second runs.
    for p in winner:
        s.delete(p.uid)
    s.advance(s.clock() + 10.0)  # past the losers' backoff
    assert len(placed(s, loser[0].name.split("-")[0])) == 3


def test_member_that_finds_no_node_releases_the_waiting_siblings() -> None:
    s = sim(rack_nodes(1, 4))
    pods = [member("g", i, 3) for i in range(2)]
    # The third member asks for a GPU model no node has: its siblings must not keep cards.
    bad = member("g", 2, 3)
    bad = dataclasses.replace(bad, request=dataclasses.replace(bad.request, gpu_models=("H100",)))
    arrive(s, *pods, bad)
    assert placed(s, "g") == {}
    assert len(s.fw.waiting) == 0
    assert int(s.snapshot.card_free_milli[s.snapshot.node_valid].min()) == 1000


def test_timeout_releases_every_card() -> None:
    group = PodGroupSpec("ns/g", GangAPI.COSCHEDULING, 3, timeout_seconds=30.0)
    s = sim(rack_nodes(1, 4), group)
    ok = [member("g", i, api=GangAPI.COSCHEDULING) for i in range(2)]
    # A member held by a scheduling gate exists (it counts for PreEnqueue) but is never
    # attempted: the two others wait at Permit, then time out together.
    gated = member("g", 2, api=GangAPI.COSCHEDULING, scheduling_gates=("later",))
    arrive(s, *ok, gated)
    assert set(placed(s, "g")) == {"g-0", "g-1"}
    assert len(s.fw.waiting) == 2
    s.advance(29.0)
    assert len(s.fw.waiting) == 2
    s.advance(30.5)
    assert placed(s, "g") == {}
    assert len(s.fw.waiting) == 0
    assert int(s.snapshot.card_free_milli[s.snapshot.node_valid].min()) == 1000


def test_pod_group_object_is_awaited_and_read() -> None:
    s = sim(rack_nodes(1, 4))
    pods = [member("g", i, api=GangAPI.COSCHEDULING) for i in range(2)]
    arrive(s, *pods)
    assert all(s.queue.where(p.uid) == "gated" for p in pods)
    gangs = s.handle.gangs
    assert isinstance(gangs, StaticGangs)
    gangs.put(PodGroupSpec("ns/g", GangAPI.COSCHEDULING, 2))
    assert s.events is not None
    s.events.pod_group_changed(GangAPI.COSCHEDULING, "ns/g")
    s.run()
    assert len(placed(s, "g")) == 2


def test_required_rack_refuses_a_gang_no_rack_holds() -> None:
    group = PodGroupSpec("ns/g", GangAPI.COSCHEDULING, 3, topology_required="rack")
    s = sim(rack_nodes(2, 2), group)
    pods = [member("g", i, api=GangAPI.COSCHEDULING) for i in range(3)]
    arrive(s, *pods)
    assert placed(s, "g") == {}
    _, st = gang_plugin(s).pre_filter(CycleState(), pods[0])
    assert st.message() == (
        "PodGroup (scheduling.x-k8s.io/v1alpha1) ns/g needs 3 more of its 3 pods placed in"
        " one rack; no rack holds them"
    )
    # Without the requirement the two racks hold it.
    s2 = sim(rack_nodes(2, 2), dataclasses.replace(group, topology_required=""))
    arrive(s2, *[dataclasses.replace(p, uid=p.uid + "b") for p in pods])
    assert len(s2.cache.pods) == 3


def test_starving_gang_reserves_nodes_against_a_stream_of_small_pods() -> None:
    # 2 nodes x 8 cards, full of 1-card pods. A 2 x 8-card gang waits; each time a small pod
    # finishes, a new one arrives. Without a reservation the new one always takes the freed
    # card; with one (after starvationSeconds) the gang's nodes drain and it runs.
    s = sim(rack_nodes(1, 2), starvation_seconds=10.0)
    small = [member("s", i, 1, cards=1) for i in range(16)]
    arrive(s, *small)
    assert len(placed(s, "s")) == 16
    big = [member("big", i, 2) for i in range(2)]
    arrive(s, *big)
    assert placed(s, "big") == {}
    t = 0.0
    nxt = 16
    waited = -1
    for step in range(40):
        t += 1.0
        s.advance(t)
        oldest = min(
            (p for p in small if p.uid in s.cache.pods), key=lambda p: p.created, default=None
        )
        if oldest is not None:
            s.delete(oldest.uid)
        newcomer = member("s", nxt, 1, cards=1)
        nxt += 1
        small.append(newcomer)
        arrive(s, newcomer)
        if len(placed(s, "big")) == 2:
            waited = step
            break
    assert len(placed(s, "big")) == 2, "the gang starved"
    # The documented bound: starvationSeconds (10), plus a backoff (podMaxBackoffSeconds,
    # 10) before the member that reserves is retried, plus draining the reserved nodes (16
    # one-card pods, one a second), plus a backoff before the gang is tried again.
    assert 0 <= waited <= 10 + 10 + 16 + 10
    assert gang_plugin(s).reservation is None  # released once the gang is placed


def test_launcher_beside_gpu_workers_is_planned_by_the_workers() -> None:
    # A CPU-only launcher created first pops first; the gang must be planned for its 8-card
    # workers (2 racks of 2 nodes: one rack holds the 2 workers), not for the launcher's
    # shape, or the workers would be sent to racks without room and the gang would fail.
    s = sim(rack_nodes(2, 2))
    arrive(s, bound_elsewhere("x1", "r0-n0", tuple(range(8))))
    launcher = member("g", 0, 3, cards=0)
    workers = [member("g", i, 3) for i in (1, 2)]
    arrive(s, launcher, *workers)
    got = placed(s, "g")
    assert len(got) == 3
    assert racks_of(s, "g") == {"r1"}


def test_a_replaced_member_goes_back_to_its_gangs_rack() -> None:
    # r0 keeps one free node, r1 takes the whole 2-pod gang. One member finishes and a
    # replacement comes: r0 and r1 now fit it equally tightly (r0 would win the tie by id),
    # but the gang grows where its running member is.
    s = sim(rack_nodes(2, 2))
    arrive(s, bound_elsewhere("x1", "r0-n0", tuple(range(8))))
    arrive(s, *[member("g", i, 2) for i in range(2)])
    assert racks_of(s, "g") == {"r1"}
    s.delete("uid-g-0")
    arrive(s, member("g", 2, 2))
    assert racks_of(s, "g") == {"r1"}
    assert len(placed(s, "g")) == 2


def test_a_reservation_its_gang_cannot_use_is_given_up() -> None:
    # The gang starves and reserves both nodes; then both nodes are tainted (its pods do not
    # tolerate it) and drain. Holding them would block everyone forever: the gang gives
    # them up, and a pod tolerating the taint is placed there again.
    nodes = rack_nodes(1, 2)
    s = sim(nodes, starvation_seconds=5.0)
    small = [member("s", i, 1, cards=8) for i in range(2)]
    arrive(s, *small)
    arrive(s, *[member("big", i, 2) for i in range(2)])
    s.advance(6.0)
    s.delete(small[0].uid)  # wakes the gang: refused again, now starving: it reserves
    s.advance(20.0)
    plugin = gang_plugin(s)
    assert plugin.reservation is not None and plugin.reservation.key == "ns/big"
    assert s.events is not None
    for n in nodes:
        s.events.node_changed(dataclasses.replace(n, taints=(Taint("k", "v", "NoSchedule"),)))
    s.delete(small[1].uid)
    s.advance(40.0)
    assert placed(s, "big") == {}
    assert plugin.reservation is None
    tolerant = dataclasses.replace(
        member("t", 0, 1, cards=8),
        tolerations=({"key": "k", "operator": "Exists", "effect": "NoSchedule"},),
    )
    arrive(s, tolerant)
    assert len(placed(s, "t")) == 1


def test_preferred_spine_keeps_a_gang_in_one_spine_at_the_cost_of_racks() -> None:
    # Spine s0: racks r0, r1, r2 of one node each; spine s1: rack r3 of two nodes. A gang of
    # three 8-card pods needs two racks across the spines (r3 + one of s0) or all three
    # racks of s0. By default the fewest racks win; `topology-preferred: spine` keeps it in
    # one spine.
    def node(rack: str, i: int, spine: str) -> NodeModel:
        n = gpu_node(f"{rack}-n{i}", rack=rack)
        return dataclasses.replace(n, spine=spine, labels={**n.labels, keys.SPINE_LABEL: spine})

    nodes = [node("r0", 0, "s0"), node("r1", 0, "s0"), node("r2", 0, "s0")]
    nodes += [node("r3", 0, "s1"), node("r3", 1, "s1")]
    s = sim(nodes)
    arrive(s, *[member("d", i, 3) for i in range(3)])
    assert len(racks_of(s, "d")) == 2 and "r3" in racks_of(s, "d")
    s2 = sim(nodes)
    pods = [
        dataclasses.replace(member("p", i, 3), annotations={keys.TOPOLOGY_PREFERRED: "spine"})
        for i in range(3)
    ]
    arrive(s2, *pods)
    assert racks_of(s2, "p") == {"r0", "r1", "r2"}


def test_a_gang_confined_to_a_full_pool_starves_no_longer_than_the_bound() -> None:
    # Pool a (rack r1) is full of 8-card pods, pool b (rack r0) is free but the gang's
    # nodeSelector keeps it in a. Free cards in b are no capacity for it: it is refused for
    # capacity (its starvation clock runs), reserves a's nodes, not b's, and runs once
    # the stream has drained them; before, it passed PreFilter on b's cards, was refused in
    # Filter, never reserved and starved.
    nodes = []
    for n in rack_nodes(2, 2):
        pool = "a" if n.rack == "r1" else "b"  # b first: where a tie would go
        nodes.append(dataclasses.replace(n, labels={**n.labels, "pool": pool}))
    s = sim(nodes, starvation_seconds=10.0)
    in_a = {"pool": "a"}
    small = [member(f"s{i}", 0, 1, node_selector=in_a) for i in range(2)]
    arrive(s, *small)
    assert len(s.cache.pods) == 2
    big = [member("big", i, 2, node_selector=in_a) for i in range(2)]
    arrive(s, *big)
    assert placed(s, "big") == {}
    d = s.queue.where(big[0].uid)
    assert d in ("unschedulable", "backoff"), d
    t, nxt, waited = 0.0, 2, -1
    for step in range(60):
        t += 1.0
        s.advance(t)
        res = gang_plugin(s).reservation
        if res is not None:
            reserved = {s.snapshot.names[r] for r in np.flatnonzero(res.mask)}
            assert reserved <= {"r1-n0", "r1-n1"}, reserved
        oldest = min(
            (p for p in small if p.uid in s.cache.pods), key=lambda p: p.created, default=None
        )
        if oldest is not None:
            s.delete(oldest.uid)
        newcomer = member(f"s{nxt}", 0, 1, node_selector=in_a)
        nxt += 1
        small.append(newcomer)
        arrive(s, newcomer)
        if len(placed(s, "big")) == 2:
            waited = step
            break
    assert set(placed(s, "big").values()) == {"r1-n0", "r1-n1"}, "the gang starved"
    # starvationSeconds, a backoff (10 s at most) before the member that reserves is
    # retried, two one-a-second deletions to drain, a backoff before the gang runs.
    assert 0 <= waited <= 10 + 10 + 2 + 10


def test_required_label_key_holds_the_gang_in_one_domain_of_that_label() -> None:
    # The upstream PodGroup's topology key may be any node label: here a zone that cuts
    # across the racks (each rack's n0 in zone a, its n1 in zone b).
    zone = "topology.kubernetes.io/zone"
    nodes = [
        dataclasses.replace(n, labels={**n.labels, zone: "a" if n.name.endswith("n0") else "b"})
        for n in rack_nodes(2, 2)
    ]
    group = PodGroupSpec("ns/g", GangAPI.WORKLOAD, 2, topology_required=zone)
    s = sim(nodes, group, dataclasses.replace(group, key="ns/big", min_member=3))
    arrive(s, *[member("g", i, api=GangAPI.WORKLOAD) for i in range(2)])
    got = placed(s, "g")
    assert len(got) == 2
    assert len({n.endswith("n0") for n in got.values()}) == 1  # one zone
    arrive(s, *[member("big", i, api=GangAPI.WORKLOAD) for i in range(3)])
    assert placed(s, "big") == {}  # no zone has three free nodes


CLUSTER_UUID = "5f1c7e2a-3b4d-4e6f-8a9b-0c1d2e3f4a5b"


def clique_nodes() -> list[NodeModel]:
    """2 racks x 2 nodes whose NVLink fabric cliques cut across the racks: every rack's n0
    in clique 1, its n1 in clique 2."""
    out = []
    for n in rack_nodes(2, 2):
        clique = f"{CLUSTER_UUID}.{1 if n.name.endswith('n0') else 2}"
        out.append(
            dataclasses.replace(n, clique=clique, labels={**n.labels, keys.GFD_CLIQUE: clique})
        )
    return out


def cliques_of(s: Simulation, gang: str) -> set[str]:
    return {s.snapshot.node_at(s.snapshot.row_of(n)).clique for n in placed(s, gang).values()}


def test_a_gang_that_fits_one_clique_goes_there_before_the_fewest_racks() -> None:
    s = sim(clique_nodes())
    arrive(s, *[member("g", i, 2) for i in range(2)])
    assert len(placed(s, "g")) == 2
    # One rack could hold it too (the rule without cliques); the clique wins.
    assert len(cliques_of(s, "g")) == 1
    assert racks_of(s, "g") == {"r0", "r1"}
    # A second gang takes the other clique whole.
    arrive(s, *[member("h", i, 2) for i in range(2)])
    assert len(placed(s, "h")) == 2 and len(cliques_of(s, "h")) == 1


def test_a_gang_no_clique_holds_falls_back_to_the_fewest_racks() -> None:
    s = sim(clique_nodes())
    arrive(s, *[member("g", i, 3) for i in range(3)])
    assert len(placed(s, "g")) == 3
    assert len(cliques_of(s, "g")) == 2


def test_required_clique_label_from_the_annotation_and_the_upstream_key() -> None:
    required = {keys.TOPOLOGY_REQUIRED: keys.GFD_CLIQUE}
    s = sim(clique_nodes())
    arrive(s, *[member("big", i, 3, annotations=required) for i in range(3)])
    assert placed(s, "big") == {}  # no clique has three free nodes
    arrive(s, *[member("g", i, 2, annotations=required) for i in range(2)])
    assert len(placed(s, "g")) == 2 and len(cliques_of(s, "g")) == 1
    group = PodGroupSpec("ns/w", GangAPI.WORKLOAD, 2, topology_required=keys.GFD_CLIQUE)
    s = sim(clique_nodes(), group)
    arrive(s, *[member("w", i, api=GangAPI.WORKLOAD) for i in range(2)])
    assert len(placed(s, "w")) == 2 and len(cliques_of(s, "w")) == 1
