"""GangStatusPublisher: what the daemon puts on the board for each PodGroup."""

from __future__ import annotations

import asyncio
from typing import Any

from gpusched.core.cache.cache import ClusterCache
from gpusched.core.cache.snapshot import Snapshot
from gpusched.core.handle import SchedulerHandle
from gpusched.daemon.gang_status import GangStatusPublisher
from gpusched.model.pod import GangAPI, PodInfo, pod_from_k8s
from gpusched.operator.board import GangBoard, GangReport
from tests.fakes import FakeCluster

X = GangAPI.COSCHEDULING
W = GangAPI.WORKLOAD


def pod(name: str, *, group: str = "pg", node: str = "", phase: str = "Pending",
        upstream: bool = False, owner: str = "") -> PodInfo:  # fmt: skip
    raw: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": {} if upstream else {"scheduling.x-k8s.io/pod-group": group},
            "creationTimestamp": "2026-12-01T20:00:00Z",
        },
        "spec": {
            "schedulerName": "ai-scheduler",
            "containers": [{"name": "c", "resources": {}}],
            **({"nodeName": node} if node else {}),
            **({"schedulingGroup": {"podGroupName": group}} if upstream else {}),
        },
        "status": {"phase": phase},
    }
    if owner:
        raw["metadata"]["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": owner, "uid": "j", "controller": True}
        ]
    return pod_from_k8s(raw)


def setup() -> tuple[GangBoard, SchedulerHandle, GangStatusPublisher, list[Any]]:
    board = GangBoard()
    handle = SchedulerHandle(ClusterCache(Snapshot(8, capacity=4)), FakeCluster(), lambda: 0.0)
    heard: list[Any] = []
    board.subscribe(heard.append)
    return board, handle, GangStatusPublisher(board, handle, clock=lambda: 1000.0), heard


def test_counts_owner_and_the_latest_refusal() -> None:
    board, handle, pub, heard = setup()
    index = handle.gang_index
    index.update(pod("a", owner="train"))
    index.update(pod("b", node="n1"))
    index.update(pod("c", node="n2", phase="Running"))
    index.update(pod("d", node="n3", phase="Running"))
    index.update(pod("d", node="n3", phase="Succeeded"))  # finished: counted, not a member
    index.update(pod("w", upstream=True))  # the other API's namesake
    pub.attempted(pod("a"), "Unschedulable", "0/3 nodes are available")
    pub.attempted(pod("b"), "", "")  # bound: the earlier refusal stays the latest one
    pub.flush()
    assert board.get(X, "ns/pg") == GangReport(
        api=X,
        key="ns/pg",
        pending=1,
        placed=1,
        running=1,
        succeeded=1,
        first_attempt=1000.0,
        owner="ns/train",
        reason="Unschedulable",
        message="0/3 nodes are available",
    )
    assert board.get(W, "ns/pg") is None  # nothing touched it
    assert heard == [frozenset({(X, "ns/pg")})]


def test_annotation_gangs_have_no_report_and_deletion_removes_one() -> None:
    board, _handle, pub, _ = setup()
    pub.touch(GangAPI.ANNOTATIONS, "ns/g")
    pub.touch(W, "ns/pg")
    pub.flush()
    assert set(board.snapshot()) == {(W, "ns/pg")}
    assert board.get(W, "ns/pg") == GangReport(W, "ns/pg")
    pub.forget(W, "ns/pg")
    pub.flush()
    assert board.snapshot() == {}


async def test_a_burst_is_published_once_per_loop_turn() -> None:
    board, handle, pub, heard = setup()
    for name in ("a", "b", "c"):
        handle.gang_index.update(pod(name))
        pub.touch(X, "ns/pg")
    assert heard == []  # not yet: at the end of this loop turn
    await asyncio.sleep(0)
    assert heard == [frozenset({(X, "ns/pg")})]
    report = board.get(X, "ns/pg")
    assert report is not None
    assert report.pending == 3


def test_a_group_whose_minimum_was_placed_stays_scheduled_after_its_members_leave() -> None:
    """A member that finishes leaves the pod watch as a DELETED event carrying the pod as
    it was (the API server's rule for a field selector it stops matching): no count keeps
    it, so the report latches that the minimum was placed once."""
    from gpusched.framework.gangs import PodGroupSpec, StaticGangs  # noqa: PLC0415

    board = GangBoard()
    gangs = StaticGangs([PodGroupSpec(key="ns/pg", api=X, min_member=2)])
    handle = SchedulerHandle(
        ClusterCache(Snapshot(8, capacity=4)), FakeCluster(), lambda: 0.0, gangs=gangs
    )
    pub = GangStatusPublisher(board, handle, clock=lambda: 1000.0)
    handle.gang_index.update(pod("a", node="n1"))
    pub.touch(X, "ns/pg")
    pub.flush()
    report = board.get(X, "ns/pg")
    assert report is not None and not report.scheduled  # 1 of 2 placed
    handle.gang_index.update(pod("b", node="n2"))
    pub.touch(X, "ns/pg")
    pub.flush()
    report = board.get(X, "ns/pg")
    assert report is not None and report.scheduled
    for uid in ("uid-a", "uid-b"):
        handle.gang_index.remove(uid)
    pub.touch(X, "ns/pg")
    pub.flush()
    report = board.get(X, "ns/pg")
    assert report is not None and report.scheduled and report.placed == 0
