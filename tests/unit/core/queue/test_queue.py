"""The scheduling queue's state machine on a fake clock (no event loop except for pop)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from gpusched.core.queue import ClusterEvent, NodeChange, SchedulingQueue, may_help
from gpusched.core.queue.queue import ACTIVE, BACKOFF, GATED, INFLIGHT, UNSCHEDULABLE
from gpusched.framework.status import INVALID_POD as POD_SPEC
from gpusched.model.pod import PodInfo, PodRequest
from gpusched.plugins.priority_sort import PrioritySort
from gpusched.plugins.scheduling_gates import SchedulingGates
from tests.fakes import Clock


def pod(name: str, *, priority: int = 0, created: float = 0.0) -> PodInfo:
    return PodInfo(
        uid=f"uid-{name}",
        namespace="ns",
        name=name,
        request=PodRequest(cpu_milli=100),
        priority=priority,
        created=created,
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def queue(clock: Clock) -> SchedulingQueue:
    less = PrioritySort(None, None).less
    return SchedulingQueue(less, clock, initial_backoff=1.0, max_backoff=10.0)


def test_pop_follows_queue_sort(queue: SchedulingQueue) -> None:
    queue.add(pod("late", created=2))
    queue.add(pod("early", created=1))
    queue.add(pod("urgent", priority=10, created=3))
    order = [queue.pop_nowait() for _ in range(3)]
    assert [i.pod.name for i in order if i] == ["urgent", "early", "late"]
    assert queue.pop_nowait() is None


def test_a_pod_is_never_queued_twice(queue: SchedulingQueue) -> None:
    p = pod("a")
    queue.add(p)
    queue.add(dataclasses.replace(p, labels={"x": "y"}))
    assert len(queue) == 1
    info = queue.pop_nowait()
    assert info is not None and info.pod.labels == {"x": "y"}
    # The watch delivers it again while in flight: only the stored version changes.
    queue.add(dataclasses.replace(p, labels={"x": "z"}))
    assert queue.pop_nowait() is None
    assert queue.where(p.uid) == INFLIGHT
    assert info.pod.labels == {"x": "z"}


def test_attempts_are_counted(queue: SchedulingQueue, clock: Clock) -> None:
    queue.add(pod("a"))
    for attempt in range(1, 4):
        info = queue.pop_nowait()
        assert info is not None and info.attempts == attempt
        queue.requeue(info, unschedulable=False)
        clock.t += 100
        queue.flush()


def test_error_goes_to_backoff_then_active(queue: SchedulingQueue, clock: Clock) -> None:
    queue.add(pod("a"))
    info = queue.pop_nowait()
    assert info is not None
    assert queue.requeue(info, unschedulable=False) == BACKOFF
    assert queue.pop_nowait() is None
    clock.t += 0.5
    assert queue.flush() == 0
    clock.t += 0.6
    assert queue.flush() == 1
    assert queue.where("uid-a") == ACTIVE
    # Second failure: 2 s.
    info = queue.pop_nowait()
    assert info is not None
    queue.requeue(info, unschedulable=False)
    clock.t += 1.5
    assert queue.flush() == 0
    clock.t += 0.6
    assert queue.flush() == 1


def test_unschedulable_waits_for_an_event(queue: SchedulingQueue, clock: Clock) -> None:
    queue.add(pod("a"))
    info = queue.pop_nowait()
    assert info is not None
    assert queue.requeue(info, unschedulable=True, rejected_by=["GPUFit"]) == UNSCHEDULABLE
    clock.t += 20
    queue.flush()
    assert queue.where("uid-a") == UNSCHEDULABLE
    assert queue.move_all(ClusterEvent.NODE_ADD) == 1
    assert queue.where("uid-a") == ACTIVE


def test_move_while_backing_off_goes_to_backoff(queue: SchedulingQueue, clock: Clock) -> None:
    queue.add(pod("a"))
    info = queue.pop_nowait()
    assert info is not None
    queue.requeue(info, unschedulable=True, rejected_by=["GPUFit"])
    clock.t += 0.2
    queue.move_all(ClusterEvent.ASSIGNED_POD_DELETE)
    assert queue.where("uid-a") == BACKOFF
    clock.t += 1
    queue.flush()
    assert queue.where("uid-a") == ACTIVE


def test_event_during_the_attempt_means_backoff(queue: SchedulingQueue) -> None:
    """kube's moveRequestCycle: the cluster changed while the pod was in flight, so the
    'unschedulable' verdict may be stale and the pod must not wait for another event."""
    queue.add(pod("a"))
    info = queue.pop_nowait()
    assert info is not None
    queue.move_all(ClusterEvent.NODE_ADD)
    assert queue.requeue(info, unschedulable=True) == BACKOFF


def test_malformed_pod_moves_only_when_it_changes(queue: SchedulingQueue, clock: Clock) -> None:
    p = pod("bad")
    queue.add(p)
    info = queue.pop_nowait()
    assert info is not None
    queue.requeue(info, unschedulable=True, rejected_by=[POD_SPEC])
    assert not may_help(frozenset({POD_SPEC}), ClusterEvent.NODE_ADD)
    assert queue.move_all(ClusterEvent.NODE_ADD) == 0
    queue.add(p)  # a status-only update decodes to the same PodInfo: nothing to retry
    assert queue.where(p.uid) == UNSCHEDULABLE
    clock.t += 5
    queue.add(dataclasses.replace(p, annotations={"gpusched.io/gpu-milli": "500"}))
    assert queue.where(p.uid) == ACTIVE


def test_leftover_unschedulable_pods_are_retried(clock: Clock) -> None:
    q = SchedulingQueue(PrioritySort(None, None).less, clock, max_unschedulable=300.0)
    q.add(pod("a"))
    info = q.pop_nowait()
    assert info is not None
    q.requeue(info, unschedulable=True, rejected_by=[POD_SPEC])
    clock.t += 299
    q.flush()
    assert q.where("uid-a") == UNSCHEDULABLE
    clock.t += 31
    q.flush()
    assert q.where("uid-a") == ACTIVE


def test_delete_everywhere(queue: SchedulingQueue) -> None:
    for name in ("a", "b", "c"):
        queue.add(pod(name))
    a = queue.pop_nowait()
    b = queue.pop_nowait()
    assert a is not None and b is not None
    queue.requeue(b, unschedulable=True)
    for uid in ("uid-a", "uid-b", "uid-c"):
        queue.delete(uid)
    assert queue.pop_nowait() is None
    assert queue.where("uid-b") == ""
    # The in-flight pod is dropped when its attempt returns.
    assert queue.requeue(a, unschedulable=False) == ""
    assert len(queue) == 0


def test_done_forgets_the_in_flight_pod(queue: SchedulingQueue) -> None:
    queue.add(pod("a"))
    info = queue.pop_nowait()
    assert info is not None
    queue.done(info.uid)
    assert len(queue) == 0
    queue.add(pod("a"))  # e.g. a stale watch event: the daemon filters assumed pods first
    assert queue.where("uid-a") == ACTIVE


def test_lazy_deletion_keeps_order(queue: SchedulingQueue) -> None:
    for i in range(200):
        queue.add(pod(f"p{i:03d}", created=float(i)))
    for i in range(0, 200, 2):
        queue.delete(f"uid-p{i:03d}")
    names = []
    while (info := queue.pop_nowait()) is not None:
        names.append(info.pod.name)
    assert names == [f"p{i:03d}" for i in range(1, 200, 2)]


async def test_pop_waits_and_close_releases(queue: SchedulingQueue) -> None:
    waiter = asyncio.create_task(queue.pop())
    await asyncio.sleep(0)
    assert not waiter.done()
    queue.add(pod("a"))
    info = await asyncio.wait_for(waiter, 1)
    assert info is not None and info.pod.name == "a"
    waiter = asyncio.create_task(queue.pop())
    await asyncio.sleep(0)
    queue.close()
    assert await asyncio.wait_for(waiter, 1) is None


def test_pending_counts(queue: SchedulingQueue) -> None:
    queue.add(pod("a"))
    queue.add(pod("b"))
    info = queue.pop_nowait()
    assert info is not None
    assert queue.pending() == {ACTIVE: 1, BACKOFF: 0, UNSCHEDULABLE: 0, INFLIGHT: 1, GATED: 0}


def test_pod_updated_during_the_attempt_is_not_parked(queue: SchedulingQueue) -> None:
    """kube's inFlightEvents include the pod's own update: an 'unschedulable' verdict
    reached on the old version must not park the new one (a fixed annotation would wait
    for the 5-minute flush, since no cluster event helps a PodSpec rejection)."""
    p = pod("bad")
    queue.add(p)
    info = queue.pop_nowait()
    assert info is not None
    fixed = dataclasses.replace(p, annotations={"gpusched.io/gpu-milli": "500"})
    queue.add(fixed)  # the watch delivers the fix while the attempt runs
    assert queue.requeue(info, unschedulable=True, rejected_by=[POD_SPEC]) == BACKOFF
    assert info.pod == fixed


def test_unchanged_pod_during_the_attempt_is_still_parked(
    queue: SchedulingQueue, clock: Clock
) -> None:
    p = pod("bad")
    queue.add(p)
    info = queue.pop_nowait()
    assert info is not None
    queue.add(p)  # a status-only update: same PodInfo
    assert queue.requeue(info, unschedulable=True, rejected_by=[POD_SPEC]) == UNSCHEDULABLE
    # and the next attempt starts clean
    queue.add(dataclasses.replace(p, annotations={"x": "1"}))
    clock.t += 10
    queue.flush()
    again = queue.pop_nowait()
    assert again is info
    assert queue.requeue(again, unschedulable=True, rejected_by=[POD_SPEC]) == UNSCHEDULABLE


@pytest.mark.parametrize("a", [524266.7282152109, 1000.0])
def test_a_clock_stopped_at_next_wakeup_always_finds_work(clock: Clock, a: float) -> None:
    """The simulator advances its virtual clock to next_wakeup(); flush must then do what
    was due. Near 2**19, (a + 30) - a < 30 in binary64: recomputing the instant two ways
    left the leftover check forever due and never run (the replay spun in place)."""
    clock.t = a - 280
    q = SchedulingQueue(PrioritySort(None, None).less, clock, max_unschedulable=300.0)
    q.add(pod("p"))
    info = q.pop_nowait()
    assert info is not None
    q.requeue(info, unschedulable=True)  # parked at a - 280: due a retry at a + 20
    clock.t = a
    assert q.flush() == 0  # a leftover check runs at a: too early for the pod
    for _ in range(3):
        due = q.next_wakeup()
        assert due is not None and due > clock.t, (due, clock.t)
        clock.t = due
        if q.flush():
            break
    else:
        raise AssertionError(f"next_wakeup kept pointing at {due} with nothing to flush")
    assert q.where("uid-p") in (ACTIVE, BACKOFF)


# -- requeue hints for node updates (hints.py) ---------------------------------------------


def parked(queue: SchedulingQueue, name: str, *rejected_by: str) -> None:
    queue.add(pod(name))
    info = queue.pop_nowait()
    assert info is not None and info.pod.name == name
    assert queue.requeue(info, unschedulable=True, rejected_by=rejected_by) == UNSCHEDULABLE


def test_a_node_update_wakes_only_pods_whose_rejecting_plugin_reads_what_changed(
    queue: SchedulingQueue, clock: Clock
) -> None:
    parked(queue, "cpu", "NodeResourcesFit")
    parked(queue, "selector", "NodeAffinity")
    parked(queue, "both", "NodeAffinity", "TaintToleration")
    parked(queue, "custom", "SomeOutOfTreeFilter")
    parked(queue, "nameless")
    clock.t += 20  # past every backoff: a moved pod goes to activeQ
    assert queue.move_all(ClusterEvent.NODE_UPDATE, change=NodeChange.NONE) == 0
    assert queue.move_all(ClusterEvent.NODE_UPDATE, change=NodeChange.TAINTS) == 3
    assert {queue.where(f"uid-{n}") for n in ("both", "custom", "nameless")} == {ACTIVE}
    assert {queue.where(f"uid-{n}") for n in ("cpu", "selector")} == {UNSCHEDULABLE}
    assert queue.move_all(ClusterEvent.NODE_UPDATE, change=NodeChange.CARDS) == 0
    assert queue.move_all(ClusterEvent.NODE_UPDATE, change=NodeChange.LABELS) == 1
    assert queue.where("uid-selector") == ACTIVE
    assert queue.move_all(ClusterEvent.NODE_ADD) == 1  # a new node may help anyone
    assert queue.where("uid-cpu") == ACTIVE


def test_an_update_during_the_attempt_makes_it_stale_only_if_it_may_help(
    queue: SchedulingQueue,
) -> None:
    queue.add(pod("a"))
    queue.add(pod("b"))
    a, b = queue.pop_nowait(), queue.pop_nowait()
    assert a is not None and b is not None
    queue.move_all(ClusterEvent.NODE_UPDATE, change=NodeChange.NONE)  # no event at all
    queue.move_all(ClusterEvent.NODE_UPDATE, change=NodeChange.ALLOCATABLE)
    # The CPU it lacked may have appeared meanwhile: retry (backoff), do not wait.
    assert queue.requeue(a, unschedulable=True, rejected_by=["NodeResourcesFit"]) == BACKOFF
    # Nothing NodeAffinity reads changed: the verdict stands.
    assert queue.requeue(b, unschedulable=True, rejected_by=["NodeAffinity"]) == UNSCHEDULABLE


def test_a_backlog_is_moved_by_group_not_scanned_per_pod(queue: SchedulingQueue) -> None:
    for i in range(2_000):
        parked(queue, f"p{i}", "NodeAffinity" if i % 2 else "NodeResourcesFit")
    assert queue.unschedulable.groups() == [
        frozenset({"NodeResourcesFit"}),
        frozenset({"NodeAffinity"}),
    ]
    assert queue.move_all(ClusterEvent.NODE_UPDATE, change=NodeChange.ALLOCATABLE) == 1_000
    assert queue.unschedulable.groups() == [frozenset({"NodeAffinity"})]
    assert len(queue.unschedulable) == 1_000
    queue.delete("uid-p1")
    assert len(list(queue.unschedulable.group(frozenset({"NodeAffinity"})))) == 999


def test_other_pods_coming_and_going_wake_no_pod_a_node_only_filter_rejected(
    queue: SchedulingQueue, clock: Clock
) -> None:
    parked(queue, "selector", "NodeAffinity", "TaintToleration")
    parked(queue, "cpu", "NodeAffinity", "NodeResourcesFit")
    clock.t += 20
    assert queue.move_all(ClusterEvent.ASSIGNED_POD_DELETE) == 1
    assert queue.where("uid-cpu") == ACTIVE and queue.where("uid-selector") == UNSCHEDULABLE
    assert queue.move_all(ClusterEvent.POD_GROUP_CHANGE) == 0
    assert queue.move_all(ClusterEvent.NODE_ADD) == 1


def gated_queue(clock: Clock, seen: list[tuple[str, str]]) -> SchedulingQueue:
    gates = SchedulingGates(None, None)  # type: ignore[arg-type]
    return SchedulingQueue(
        PrioritySort(None, None).less,
        clock,
        pre_enqueue=gates.pre_enqueue,
        on_gated=lambda p, st: seen.append((p.name, st.message())),
    )


def test_a_gated_pod_waits_in_the_gated_set_not_attempted(clock: Clock) -> None:
    seen: list[tuple[str, str]] = []
    queue = gated_queue(clock, seen)
    gated = dataclasses.replace(pod("g"), scheduling_gates=("x.io/wait",))
    queue.add(gated)
    queue.add(pod("free"))
    assert queue.where(gated.uid) == GATED
    assert queue.pending()[GATED] == 1 and len(queue) == 2
    assert seen == [("g", "waiting for scheduling gates: [x.io/wait]")]
    info = queue.pop_nowait()
    assert info is not None and info.pod.name == "free"
    assert queue.pop_nowait() is None
    # Neither a cluster event nor the periodic flush moves it.
    queue.move_all(ClusterEvent.NODE_ADD)
    clock.t += 1000
    queue.flush()
    assert queue.where(gated.uid) == GATED
    # An update that keeps a gate keeps it there, and does not report it again.
    queue.add(dataclasses.replace(gated, labels={"a": "b"}))
    assert queue.where(gated.uid) == GATED and len(seen) == 1


def test_removing_the_last_gate_moves_the_pod_to_active(clock: Clock) -> None:
    queue = gated_queue(clock, [])
    gated = dataclasses.replace(pod("g"), scheduling_gates=("x.io/a", "x.io/b"))
    queue.add(gated)
    queue.add(dataclasses.replace(gated, scheduling_gates=("x.io/b",)))
    assert queue.where(gated.uid) == GATED
    queue.add(dataclasses.replace(gated, scheduling_gates=()))
    assert queue.where(gated.uid) == ACTIVE and queue.pending()[GATED] == 0
    info = queue.pop_nowait()
    assert info is not None and info.pod.scheduling_gates == ()


def test_deleting_a_gated_pod_forgets_it(clock: Clock) -> None:
    queue = gated_queue(clock, [])
    gated = dataclasses.replace(pod("g"), scheduling_gates=("x.io/a",))
    queue.add(gated)
    queue.delete(gated.uid)
    assert queue.where(gated.uid) == "" and len(queue) == 0


def parked_in(queue: SchedulingQueue, name: str, namespace: str, *rejected_by: str) -> None:
    queue.add(dataclasses.replace(pod(name), namespace=namespace))
    info = queue.pop_nowait()
    assert info is not None and info.pod.name == name
    assert queue.requeue(info, unschedulable=True, rejected_by=rejected_by) == UNSCHEDULABLE


def test_spread_rejections_wake_on_pods_of_their_namespace_and_node_labels(
    queue: SchedulingQueue, clock: Clock
) -> None:
    parked_in(queue, "spread-a", "a", "PodTopologySpread")
    parked_in(queue, "spread-b", "b", "PodTopologySpread")
    parked_in(queue, "cpu", "a", "NodeResourcesFit")
    parked_in(queue, "both", "b", "PodTopologySpread", "NodeResourcesFit")
    clock.t += 20
    # A bind elsewhere: only spread rejections in that namespace (a capacity rejection is
    # not retried on every bind).
    assert queue.move_all(ClusterEvent.ASSIGNED_POD_ADD, namespace="a") == 1
    assert queue.where("uid-spread-a") == ACTIVE
    assert queue.where("uid-spread-b") == UNSCHEDULABLE
    assert queue.move_all(ClusterEvent.ASSIGNED_POD_UPDATE, namespace="c") == 0
    # A deletion in namespace a frees capacity for "both" too (NodeResourcesFit is not
    # namespaced), but moves no other namespace's spread rejection.
    assert queue.move_all(ClusterEvent.ASSIGNED_POD_DELETE, namespace="a") == 2
    assert queue.where("uid-both") == ACTIVE and queue.where("uid-cpu") == ACTIVE
    assert queue.where("uid-spread-b") == UNSCHEDULABLE
    # Node events ignore namespaces; a deleted node may have held the least crowded domain.
    assert queue.move_all(ClusterEvent.NODE_UPDATE, change=NodeChange.ALLOCATABLE) == 0
    assert queue.move_all(ClusterEvent.NODE_DELETE) == 1
    assert queue.where("uid-spread-b") == ACTIVE


def test_assigned_pod_add_wakes_only_spread_rejections() -> None:
    for plugins in (
        frozenset({"NodeResourcesFit"}),
        frozenset({"GPUFit"}),
        frozenset({"NodeAffinity"}),
        frozenset(),
    ):
        assert not may_help(plugins, ClusterEvent.ASSIGNED_POD_ADD)
        assert not may_help(plugins, ClusterEvent.ASSIGNED_POD_UPDATE)
    spread = frozenset({"PodTopologySpread"})
    assert may_help(spread, ClusterEvent.ASSIGNED_POD_ADD)
    assert may_help(spread, ClusterEvent.ASSIGNED_POD_DELETE)
    assert not may_help(spread, ClusterEvent.NODE_UPDATE, NodeChange.CARDS)
    assert may_help(spread, ClusterEvent.NODE_UPDATE, NodeChange.TAINTS)
    assert may_help(spread, ClusterEvent.NODE_UPDATE, NodeChange.LABELS)
    assert may_help(spread, ClusterEvent.NODE_ADD)
    assert not may_help(frozenset({"GPUFit"}), ClusterEvent.NODE_DELETE)


def test_quota_rejections_wake_on_their_tenants_departures_and_quota_changes(
    queue: SchedulingQueue, clock: Clock
) -> None:
    tenants = {"ml-1": "ml", "ml-2": "ml"}
    queue.tenant_of = lambda ns: tenants.get(ns, ns)
    parked_in(queue, "quota-ml", "ml-1", "ElasticQuota")
    parked_in(queue, "quota-b", "team-b", "ElasticQuota")
    parked_in(queue, "cpu", "team-b", "NodeResourcesFit")
    parked_in(queue, "gpu", "team-b", "GPUFit")
    clock.t += 20
    # A bind never lifts a quota refusal; a node's labels neither.
    assert queue.move_all(ClusterEvent.ASSIGNED_POD_ADD, namespace="ml-2") == 0
    assert queue.move_all(ClusterEvent.NODE_UPDATE, change=NodeChange.LABELS) == 0
    # A departure in another namespace of the same tenant: its refused pods (and the
    # capacity rejections anywhere); not the other tenant's.
    assert queue.move_all(ClusterEvent.ASSIGNED_POD_DELETE, namespace="ml-2") == 3
    assert queue.where("uid-quota-ml") == ACTIVE and queue.where("uid-cpu") == ACTIVE
    assert queue.where("uid-quota-b") == UNSCHEDULABLE
    # Back to the unschedulable set, then an ElasticQuota change: only quota refusals.
    others = []
    for _ in range(3):
        info = queue.pop_nowait()
        assert info is not None
        if info.pod.name != "quota-ml":
            others.append(info.uid)
        queue.requeue(
            info,
            unschedulable=True,
            rejected_by=(("ElasticQuota",) if info.pod.name == "quota-ml" else ("GPUFit",)),
        )
    clock.t += 20  # past their backoff
    assert queue.move_all(ClusterEvent.QUOTA_CHANGE) == 2
    assert queue.where("uid-quota-ml") == ACTIVE and queue.where("uid-quota-b") == ACTIVE
    assert [queue.where(uid) for uid in others] == [UNSCHEDULABLE, UNSCHEDULABLE]
