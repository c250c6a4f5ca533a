"""ClusterEvents: what a watch event does to the cache and the queue; pod warnings."""

from __future__ import annotations

from typing import Any

from gpusched.core.events import ClusterEvents
from gpusched.core.queue import SchedulingQueue
from gpusched.model import keys
from gpusched.model.pod import PodInfo, pod_from_k8s
from gpusched.plugins.priority_sort import PrioritySort
from tests.builders import cache_with
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
