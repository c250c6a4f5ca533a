"""ClusterEvents.dra_changed: which pods a ResourceClaim, ResourceSlice or DeviceClass
change wakes (kube-scheduler's DynamicResources events and isSchedulableAfterClaimChange)."""

from __future__ import annotations

from typing import Any

from gpusched.core.events import ClusterEvents
from gpusched.core.queue import ClusterEvent, SchedulingQueue, may_help
from gpusched.core.queue.queue import UNSCHEDULABLE
from gpusched.framework.dra import CLAIMS, CLASSES, SLICES, DraChange
from gpusched.framework.status import Status, unschedulable
from gpusched.model.pod import pod_from_k8s
from gpusched.plugins.priority_sort import PrioritySort
from tests.builders import cache_with
from tests.fakes import Clock

DRA = frozenset({"DynamicResources"})


def claimed_pod(name: str, claim: str, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {
            "schedulerName": "ai-scheduler",
            "containers": [{"name": "c"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            **extra,
        },
    }


def parked(*pods: dict[str, Any], rejected_by: frozenset[str] = DRA) -> ClusterEvents:
    """ClusterEvents whose queue holds these pods as rejected by `rejected_by`."""
    queue = SchedulingQueue(PrioritySort(None, None).less, Clock())
    ev = ClusterEvents(cache_with("a"), queue, [], ["ai-scheduler"])
    for raw in pods:
        ev.pod_changed(pod_from_k8s(raw))
    while (info := queue.pop_nowait()) is not None:
        queue.requeue(info, unschedulable=True, rejected_by=rejected_by)
    return ev


def where(ev: ClusterEvents, name: str) -> str:
    return ev.queue.where(f"uid-{name}")


def test_a_claim_change_wakes_only_the_pods_using_it() -> None:
    ev = parked(claimed_pod("user", "c1"), claimed_pod("other", "c2"))
    assert ev.claim_users == {("ns", "c1"): {"uid-user"}, ("ns", "c2"): {"uid-other"}}
    # The claim's finalizer was added (no status change): nobody cares.
    ev.dra_changed(DraChange(CLAIMS, "ns", "c1"))
    assert where(ev, "user") == UNSCHEDULABLE
    ev.dra_changed(DraChange(CLAIMS, "ns", "c1", status_changed=True))
    assert where(ev, "user") != UNSCHEDULABLE and where(ev, "other") == UNSCHEDULABLE
    # A claim created in another namespace with the same name is not ours.
    ev.dra_changed(DraChange(CLAIMS, "elsewhere", "c2", created=True))
    assert where(ev, "other") == UNSCHEDULABLE


def test_a_deallocation_frees_devices_for_every_pod_dynamic_resources_rejected() -> None:
    ev = parked(claimed_pod("a", "c1"), claimed_pod("b", "c2"))
    ev.dra_changed(DraChange(CLAIMS, "ns", "unrelated", deallocated=True))
    assert where(ev, "a") != UNSCHEDULABLE and where(ev, "b") != UNSCHEDULABLE


def test_slices_and_classes_wake_pods_dynamic_resources_rejected_only() -> None:
    ev = parked(claimed_pod("a", "c1"))
    fit = parked(claimed_pod("b", "c1"), rejected_by=frozenset({"NodeResourcesFit"}))
    for events in (ev, fit):
        events.dra_changed(DraChange(SLICES, "", "node-a-gpu.nvidia.com-x7k2p", node="node-a"))
    assert where(ev, "a") != UNSCHEDULABLE and where(fit, "b") == UNSCHEDULABLE
    ev2 = parked(claimed_pod("a", "c1"))
    ev2.dra_changed(DraChange(CLASSES, "", "gpu.nvidia.com"))
    assert where(ev2, "a") != UNSCHEDULABLE
    for event in (ClusterEvent.RESOURCE_CLAIM_CHANGE, ClusterEvent.RESOURCE_SLICE_CHANGE):
        assert may_help(DRA, event) and may_help(frozenset(), event)
        assert not may_help(frozenset({"VolumeBinding"}), event)


def test_the_index_forgets_bound_and_deleted_pods() -> None:
    ev = parked(claimed_pod("a", "c1"), claimed_pod("b", "c1"))
    bound = claimed_pod("a", "c1", nodeName="a")
    ev.pod_changed(pod_from_k8s(bound))
    assert ev.claim_users == {("ns", "c1"): {"uid-b"}}
    ev.pod_deleted(pod_from_k8s(claimed_pod("b", "c1")))
    assert ev.claim_users == {} and ev._claims_of == {}


def test_a_gated_user_is_checked_again_when_its_claim_appears() -> None:
    checks: list[str] = []

    def pre_enqueue(pod: Any) -> Status:
        checks.append(pod.name)
        return Status() if len(checks) > 1 else unschedulable("waiting for claim")

    queue = SchedulingQueue(PrioritySort(None, None).less, Clock(), pre_enqueue=pre_enqueue)
    ev = ClusterEvents(cache_with("a"), queue, [], ["ai-scheduler"])
    ev.pod_changed(pod_from_k8s(claimed_pod("a", "c1")))
    assert where(ev, "a") == "gated"
    ev.dra_changed(DraChange(CLAIMS, "ns", "c1", created=True))
    # PreEnqueue ran again and admitted it.
    assert where(ev, "a") == "active" and len(checks) >= 2
