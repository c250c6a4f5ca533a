"""ClusterEvents: what a watch event does to the cache and the queue: pod warnings, node
updates and the queue's requeue hints."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpusched.core.events import ClusterEvents
from gpusched.core.queue import SchedulingQueue
from gpusched.model import keys
from gpusched.model.node import NodeModel
from gpusched.model.pod import PodInfo, pod_from_k8s
from gpusched.plugins.priority_sort import PrioritySort
from gpusched.sim.engine import Simulation
from tests.builders import ai_pod, ai_sim, cache_with, gpu_node
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
