"""ClusterEvents: what a watch event does to the cache and the queue: pod warnings, node
updates and the queue's requeue hints."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpusched.core.cache.cache import ClusterCache
from gpusched.core.cache.snapshot import Snapshot
from gpusched.core.events import ClusterEvents
from gpusched.core.queue import SchedulingQueue
from gpusched.framework.snapshot import NO_CARD
from gpusched.model import keys
from gpusched.model.node import NodeModel, node_from_k8s
from gpusched.model.pod import PodInfo, pod_from_k8s
from gpusched.plugins.priority_sort import PrioritySort
from gpusched.sim.engine import Simulation
from tests.builders import (
    ai_pod,
    ai_sim,
    cache_with,
    fuzz_settings,
    gpu_node,
    node,
    raw_nodes,
    raw_pods,
)
from tests.fakes import Clock


def events_with(warned: list[tuple[str, str]]) -> ClusterEvents:
    """ClusterEvents over a cache with one 8-card node "a"; pod warnings go to `warned`."""

    def on_pod_warning(pod: PodInfo, message: str) -> None:
        warned.append((pod.key, message))

    queue = SchedulingQueue(PrioritySort(None, None).less, Clock())
    return ClusterEvents(cache_with("a"), queue, [], ["ai-scheduler"], on_pod_warning)


def raw_pod(annotations: dict[str, str], cpu: str = "1", **status: Any) -> dict[str, Any]:
    """A running shared-GPU pod on node a, as the watch delivers it."""
    return {
        "metadata": {
            "name": "s",
            "namespace": "ns",
            "uid": "u-s",
            "annotations": {keys.GPU_MILLI: "250", **annotations},
        },
        "spec": {
            "schedulerName": "ai-scheduler",
            "nodeName": "a",
            "containers": [{"name": "main", "resources": {"requests": {"cpu": cpu}}}],
        },
        "status": {"phase": "Running", **status},
    }


def test_a_forged_assignment_reaches_on_pod_warning_and_is_charged() -> None:
    warned: list[tuple[str, str]] = []
    ev = events_with(warned)
    ev.pod_changed(pod_from_k8s(raw_pod({keys.GPU_IDS: "1", keys.GPU_MILLI_ASSIGNED: "0"})))
    snap = ev.cache.snapshot
    assert snap.card_free_milli[snap.row_of("a"), 1] == 0
    assert len(warned) == 1 and warned[0][0] == "ns/s"
    assert "gpusched.io/gpu-milli-assigned='0' is outside 250-1000" in warned[0][1]


def test_a_trusted_assignment_warns_nobody() -> None:
    warned: list[tuple[str, str]] = []
    ev = events_with(warned)
    ev.pod_changed(pod_from_k8s(raw_pod({keys.GPU_IDS: "1", keys.GPU_MILLI_ASSIGNED: "250"})))
    snap = ev.cache.snapshot
    assert snap.card_free_milli[snap.row_of("a"), 1] == 750
    assert warned == []


def test_an_edit_after_binding_is_reported_once_per_version() -> None:
    warned: list[tuple[str, str]] = []
    ev = events_with(warned)
    ev.pod_changed(pod_from_k8s(raw_pod({keys.GPU_IDS: "1", keys.GPU_MILLI_ASSIGNED: "250"})))
    edited = pod_from_k8s(raw_pod({keys.GPU_IDS: "4", keys.GPU_MILLI_ASSIGNED: "250"}))
    ev.pod_changed(edited)
    ev.pod_changed(edited)  # the same version again (a re-list): nothing new to say
    assert len(warned) == 1 and "changed after binding" in warned[0][1]
    snap = ev.cache.snapshot
    row = snap.row_of("a")
    assert (snap.card_free_milli[row, 1], snap.card_free_milli[row, 4]) == (0, 0)


def test_a_status_only_resize_is_recharged_and_deletion_frees_it() -> None:
    """Only the status changes when the kubelet applies a resize the spec asked earlier (or
    reports one it is still running with): the node must follow it."""
    ev = events_with([])
    snap = ev.cache.snapshot
    row = snap.row_of("a")
    ann = {keys.GPU_IDS: "1", keys.GPU_MILLI_ASSIGNED: "250"}
    ev.pod_changed(pod_from_k8s(raw_pod(ann)))
    assert snap.node_cpu_free[row] == 63_000
    running_with_4 = [{"name": "main", "resources": {"requests": {"cpu": "4"}}}]
    pod = pod_from_k8s(raw_pod(ann, containerStatuses=running_with_4))
    ev.pod_changed(pod)
    assert snap.node_cpu_free[row] == 60_000
    ev.pod_deleted(pod)
    assert snap.node_cpu_free[row] == 64_000
    assert int(snap.card_free_milli[row].sum()) == 8000


GFD_TIMESTAMP = "nvidia.com/gfd.timestamp"


def labelled(name: str, stamp: int, zone: str = "z1") -> NodeModel:
    labels = {"kubernetes.io/hostname": name, "zone": zone, GFD_TIMESTAMP: str(stamp)}
    return dataclasses.replace(gpu_node(name, cards=2), labels=labels)


def backlog(sim: Simulation) -> None:
    """Pods that fit nowhere, parked as unschedulable: by NodeAffinity and by
    NodeResourcesFit."""
    for i in range(10):
        p = dataclasses.replace(ai_pod(f"sel{i}"), node_selector={"zone": "z9"})
        assert sim.submit(p).result.name == "UNSCHEDULABLE"
        big = ai_pod(f"cpu{i}")
        big = dataclasses.replace(big, request=dataclasses.replace(big.request, cpu_milli=10**6))
        assert sim.submit(big).result.name == "UNSCHEDULABLE"
    assert sim.queue.pending()["unschedulable"] == 20


def test_label_churn_nothing_selects_on_wakes_no_pod() -> None:
    sim = ai_sim(labelled("a", 0), labelled("b", 0))
    backlog(sim)
    snap = sim.snapshot
    sets, gen = len(snap.labelsets), snap.generation
    for stamp in range(1, 10_001):
        sim.events.node_changed(labelled("a", stamp))
        assert sim.queue.pending()["unschedulable"] == 20, stamp
    assert (len(snap.labelsets), snap.generation) == (sets, gen)


def test_an_update_wakes_the_pods_it_may_help() -> None:
    sim = ai_sim(labelled("a", 0), labelled("b", 0))
    backlog(sim)
    sim.clock.advance_to(100.0)  # past their backoff: moved pods go to activeQ
    sim.events.node_changed(labelled("a", 1, zone="z2"))  # a selected key: z9 still absent
    assert sim.queue.where("uid-sel0") == "active" and sim.queue.where("uid-cpu0") == (
        "unschedulable"
    )
    sim.run()  # they fail again and are parked again
    assert sim.queue.pending()["unschedulable"] == 20
    grown = dataclasses.replace(labelled("a", 1, zone="z2"), cpu_milli=128_000)
    sim.events.node_changed(grown)
    assert sim.queue.where("uid-cpu0") == "active" and sim.queue.where("uid-sel0") == (
        "unschedulable"
    )


# --- fuzzed nodes through the handlers: used or refused, the columns always consistent ----


def _check_rows(ev: ClusterEvents) -> None:
    """Every row matches the node the handlers accepted; a node with no pods is all free."""
    snap = ev.cache.snapshot
    assert set(snap.rows) == set(ev.nodes)
    for name, row in snap.rows.items():
        n = ev.nodes[name]
        assert snap.names[row] == name and snap.nodes[row] == n and snap.node_valid[row]
        count = int(snap.node_card_count[row])
        assert count == n.gpu_count <= snap.max_cards
        present = snap.card_model[row] != NO_CARD
        assert present.tolist() == [i < count for i in range(snap.max_cards)]
        assert (snap.card_free_milli[row][present] == 1000).all()
        assert (snap.card_free_mem[row] == snap.card_total_mem[row]).all()
        assert snap.card_total_mem[row][:count].tolist() == [c.memory_mib for c in n.cards]
        assert (snap.node_cpu_free[row], snap.node_cpu_alloc[row]) == (n.cpu_milli, n.cpu_milli)
        assert (snap.node_mem_free[row], snap.node_pods_free[row]) == (n.memory_bytes, n.pods)


@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["n0", "n1", "n2"]), st.booleans()).flatmap(
            lambda t: st.tuples(st.just(t[0]), st.just(t[1]), raw_nodes(t[0]))
        ),
        min_size=1,
        max_size=6,
    )
)
@fuzz_settings(80)
def test_any_node_sequence_is_used_or_refused_naming_the_node_and_leaves_no_row_behind(
    steps: list[tuple[str, bool, dict[str, Any]]],
) -> None:
    queue = SchedulingQueue(PrioritySort(None, None).less, Clock())
    ev = ClusterEvents(ClusterCache(Snapshot(8, capacity=2)), queue, [], ["ai-scheduler"])
    for name, delete, raw in steps:
        if delete:
            ev.node_deleted(name)
        else:
            n = node_from_k8s(raw)  # never raises
            refused = ""
            try:
                ev.node_changed(n)
            except ValueError as exc:  # the only refusal: it names the node and the reason
                refused = str(exc)
            if refused:
                assert refused.startswith(f"node {name}") and name not in ev.nodes
        _check_rows(ev)
    for name in list(ev.nodes):
        ev.node_deleted(name)
    snap = ev.cache.snapshot
    assert not snap.rows and not snap.node_valid.any()
    assert snap.labelsets.live == 0 and snap.taintsets.live == 0


# --- fuzzed bound pods through the handlers: charged, re-charged, freed exactly ----------

_FLEET = (gpu_node("a"), gpu_node("b", cards=2, mem=16384), node("c"))


@given(
    versions=st.lists(
        st.sampled_from(["u0", "u1", "u2", "u3"]).flatmap(
            lambda uid: raw_pods(uid, node_names=("a", "b", "c"))
        ),
        min_size=1,
        max_size=6,
    ),
    node_first=st.booleans(),
)
@fuzz_settings(60)
def test_any_bound_pods_are_charged_within_the_cards_and_freed_exactly(
    versions: list[dict[str, Any]], node_first: bool
) -> None:
    """Adds and updates (resizes, edited annotations, another node, terminal phases) of
    fuzzed pods, then their deletion: the columns end exactly at the node totals."""
    warned: list[tuple[str, str]] = []
    queue = SchedulingQueue(PrioritySort(None, None).less, Clock())
    cache = ClusterCache(Snapshot(8, capacity=2))
    ev = ClusterEvents(cache, queue, [], ["ai-scheduler"], lambda p, m: warned.append((p.key, m)))
    if node_first:
        for n in _FLEET:
            ev.node_changed(n)
    pods = {}
    for raw in versions:
        p = pod_from_k8s(raw)
        ev.pod_changed(p)  # never raises
        pods[p.uid] = p
        snap = cache.snapshot
        for row in snap.rows.values():
            assert (snap.card_free_milli[row] <= 1000).all()
            assert (snap.card_free_mem[row] <= snap.card_total_mem[row]).all()
            assert snap.node_cpu_free[row] <= snap.node_cpu_alloc[row]
    if not node_first:
        for n in _FLEET:  # the pods' nodes arrive after them
            ev.node_changed(n)
    assert all(m.startswith(f"pod {k} on ") for k, m in warned)
    for p in pods.values():
        ev.pod_deleted(p)
    snap = cache.snapshot
    assert not cache.pods and not cache._jobs
    for n in _FLEET:
        row = snap.row_of(n.name)
        count = n.gpu_count
        assert snap.card_free_milli[row][:count].tolist() == [1000] * count
        assert (snap.card_free_mem[row] == snap.card_total_mem[row]).all()
        assert (snap.node_cpu_free[row], snap.node_mem_free[row], snap.node_pods_free[row]) == (
            n.cpu_milli,
            n.memory_bytes,
            n.pods,
        )


def test_a_bound_pod_wakes_pods_inter_pod_affinity_rejected_and_no_other() -> None:
    sim = ai_sim(labelled("a", 0), labelled("b", 0))
    near_web = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}
            ]
        }
    }
    for i in range(3):
        p = dataclasses.replace(ai_pod(f"aff{i}"), labels={"app": "api"}, affinity=near_web)
        assert sim.submit(p).result.name == "UNSCHEDULABLE"
        big = ai_pod(f"cpu{i}")
        big = dataclasses.replace(big, request=dataclasses.replace(big.request, cpu_milli=10**6))
        assert sim.submit(big).result.name == "UNSCHEDULABLE"
    sim.clock.advance_to(100.0)  # past their backoff: moved pods go to activeQ
    web = dataclasses.replace(ai_pod("web"), labels={"app": "web"}, node_name="b", phase="Running")
    sim.events.pod_changed(web)
    assert sim.queue.where("uid-aff0") == "active"
    assert sim.queue.where("uid-cpu0") == "unschedulable"
    sim.run()
    placed = {e.pod.name: e.node for e in sim.cache.allocations()}
    # Both nodes are in zone z1 (labelled()): either is in the web pod's domain.
    assert {placed[f"aff{i}"] for i in range(3)} <= {"a", "b"}
    # A bound pod's relabel (AssignedPodUpdate) never wakes what NodeResourcesFit rejected.
    sim.events.pod_changed(dataclasses.replace(web, labels={"app": "web", "v": "2"}))
    assert sim.queue.where("uid-cpu0") == "unschedulable"


# --- pod events for PodTopologySpread's rejections ----------------------------------------


def test_bound_pods_arriving_relabelled_or_terminating_wake_spread_rejections_of_their_ns() -> None:
    ev = events_with([])
    queue = ev.queue
    waiting = dataclasses.replace(ai_pod("w"), labels={"app": "x"})
    queue.add(waiting)
    info = queue.pop_nowait()
    assert info is not None
    clock = queue.clock
    assert isinstance(clock, Clock)

    def park() -> None:
        got = queue.pop_nowait() if queue.where("uid-w") == "active" else None
        target = got if got is not None else info
        queue.inflight[target.uid] = target
        assert queue.requeue(target, unschedulable=True, rejected_by=["PodTopologySpread"]) == (
            "unschedulable"
        )
        clock.t += 100.0  # past any backoff

    park()
    bound = dataclasses.replace(ai_pod("b1"), node_name="a", phase="Running", labels={"app": "x"})
    ev.pod_changed(dataclasses.replace(bound, namespace="elsewhere", uid="uid-o"))
    assert queue.where("uid-w") == "unschedulable"
    ev.pod_changed(bound)  # a new bound pod in ns
    assert queue.where("uid-w") == "active"
    park()
    ev.pod_changed(bound)  # the same version again (a resync): nothing changed
    assert queue.where("uid-w") == "unschedulable"
    ev.pod_changed(dataclasses.replace(bound, labels={"app": "y"}))
    assert queue.where("uid-w") == "active"
    park()
    ev.pod_changed(dataclasses.replace(bound, labels={"app": "y"}, deleting=True))
    assert queue.where("uid-w") == "active"
    park()
    ev.pod_deleted(bound)
    assert queue.where("uid-w") == "active"


def test_a_gang_member_finishing_out_of_the_watch_counts_as_succeeded() -> None:
    """The daemon's pod watch selects unfinished pods: a member that succeeds arrives as a
    DELETED event with its final phase, and its gang counts it (PodGroup status), while a
    member deleted before it finished is only gone."""
    ev = events_with([])
    members = []
    for i in range(2):
        raw = raw_pod({"scheduling.ai/gang-name": "g", "scheduling.ai/gang-total": "2"})
        raw["metadata"].update(name=f"m{i}", uid=f"u-m{i}")
        members.append(pod_from_k8s(raw))
        ev.pod_changed(members[-1])
    gang = ev.gangs.get("ns/g")
    assert gang is not None and len(gang.members) == 2
    ev.pod_deleted(dataclasses.replace(members[0], phase="Succeeded"))
    assert (len(gang.members), gang.succeeded, gang.failed) == (1, 1, 0)
    ev.pod_deleted(members[1])  # deleted while running: not a success
    assert (gang.succeeded, gang.failed) == (1, 0)
