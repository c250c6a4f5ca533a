"""pod_group_from_k8s on PodGroups shaped as the API server returns them, and
KubePodGroups' store and change callbacks."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from gpusched.framework.gangs import PodGroupSpec
from gpusched.kube.podgroups import KubePodGroups, pod_group_from_k8s
from gpusched.kube.watch import EventType
from gpusched.model.pod import GangAPI
from tests.fakes import FakeKube

X = GangAPI.COSCHEDULING
W = GangAPI.WORKLOAD


def x_k8s(spec: dict[str, Any] | None = None, annotations: dict[str, str] | None = None) -> Any:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {
            "name": "train",
            "namespace": "team-a",
            "uid": "0b6f3c1e-1111-4c5e-9c55-5d9d2f3a8e01",
            "resourceVersion": "4711",
            "generation": 1,
            "creationTimestamp": "2026-12-01T20:00:00Z",
            **({"annotations": annotations} if annotations is not None else {}),
        },
        "spec": {"minMember": 4, "scheduleTimeoutSeconds": 120} if spec is None else spec,
        "status": {"phase": "Pending"},
    }


def upstream(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> Any:
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {
            "name": "job-1-worker",
            "namespace": "team-b",
            "uid": "6a9f0b2c-2222-4f1e-8d6e-0e1c1b7d9f02",
            "resourceVersion": "99",
            "generation": 1,
            "creationTimestamp": "2026-12-01T20:00:30Z",
            "finalizers": ["scheduling.k8s.io/podgroup-protection"],
            **({"annotations": annotations} if annotations is not None else {}),
        },
        "spec": spec,
        "status": {},
    }


GANG_OF_8 = {
    "podGroupTemplateRef": {"workload": {"workloadName": "job-1", "podGroupTemplateName": "w"}},
    "schedulingPolicy": {"gang": {"minCount": 8}},
}


def test_x_k8s_pod_group() -> None:
    g = pod_group_from_k8s(x_k8s(annotations={"gpusched.io/topology-required": "rack"}), X)
    assert g == PodGroupSpec(
        key="team-a/train",
        api=X,
        min_member=4,
        timeout_seconds=120.0,
        topology_required="rack",
        created=datetime(2026, 12, 1, 20, 0, tzinfo=UTC).timestamp(),
        uid="0b6f3c1e-1111-4c5e-9c55-5d9d2f3a8e01",
    )


@pytest.mark.parametrize(
    ("spec", "min_member", "timeout"),
    [
        ({}, 1, None),  # minMember unset (omitempty 0): each pod on its own
        ({"minMember": 0}, 1, None),
        ({"minMember": 3, "scheduleTimeoutSeconds": 0}, 3, None),  # 0: the plugin's default
    ],
)
def test_x_k8s_defaults(spec: dict[str, Any], min_member: int, timeout: float | None) -> None:
    g = pod_group_from_k8s(x_k8s(spec), X)
    assert (g.min_member, g.timeout_seconds, g.problem) == (min_member, timeout, "")


@pytest.mark.parametrize(
    ("obj", "problem"),
    [
        (x_k8s({"minMember": -1}), "spec.minMember=-1: must be an integer >= 1"),
        (x_k8s({"minMember": "4"}), "spec.minMember='4': must be an integer >= 1"),
        (x_k8s({"minMember": True}), "spec.minMember=True: must be an integer >= 1"),
        (
            x_k8s({"minMember": 2, "scheduleTimeoutSeconds": -5}),
            "spec.scheduleTimeoutSeconds=-5: must be an integer >= 0",
        ),
        (
            x_k8s(annotations={"gpusched.io/topology-preferred": "row"}),
            "annotation gpusched.io/topology-preferred='row':"
            " must be rack or spine or nvidia.com/gpu.clique",
        ),
        ({**x_k8s(), "spec": ["minMember", 2]}, "spec is not an object"),
    ],
)
def test_x_k8s_malformed(obj: Any, problem: str) -> None:
    assert pod_group_from_k8s(obj, X).problem == problem


def test_upstream_gang() -> None:
    g = pod_group_from_k8s(upstream(GANG_OF_8), W)
    assert (g.key, g.min_member, g.gang, g.problem) == ("team-b/job-1-worker", 8, True, "")
    assert g.uid == "6a9f0b2c-2222-4f1e-8d6e-0e1c1b7d9f02"
    assert g.timeout_seconds is None


def test_upstream_basic_is_no_gang() -> None:
    g = pod_group_from_k8s(upstream({"schedulingPolicy": {"basic": {}}}), W)
    assert (g.min_member, g.gang, g.problem) == (1, False, "")


def test_upstream_topology_key_is_required() -> None:
    spec = {
        **GANG_OF_8,
        "schedulingConstraints": {"topology": [{"key": "topology.gpusched.io/rack"}]},
    }
    g = pod_group_from_k8s(
        upstream(spec, annotations={"gpusched.io/topology-preferred": "spine"}), W
    )
    assert (g.topology_required, g.topology_preferred, g.problem) == (
        "topology.gpusched.io/rack",
        "spine",
        "",
    )


@pytest.mark.parametrize(
    ("spec", "annotations", "problem"),
    [
        (
            {
                **GANG_OF_8,
                "schedulingConstraints": {"topology": [{"key": "a"}, {"key": "b"}]},
            },
            None,
            "spec.schedulingConstraints.topology has 2 entries: one level is supported",
        ),
        (
            {**GANG_OF_8, "schedulingConstraints": {"topology": [{"key": ""}]}},
            None,
            "spec.schedulingConstraints.topology[0].key must be a label key",
        ),
        (
            {**GANG_OF_8, "schedulingConstraints": {"topology": [{"key": "zone"}]}},
            {"gpusched.io/topology-required": "rack"},
            "spec.schedulingConstraints.topology[0].key='zone' and annotation"
            " gpusched.io/topology-required='rack' both require a topology: use one",
        ),
        ({"schedulingPolicy": {}}, None, "spec.schedulingPolicy sets neither basic nor gang"),
        (
            {"schedulingPolicy": {"basic": {}, "gang": {"minCount": 2}}},
            None,
            "spec.schedulingPolicy sets both basic and gang: set one",
        ),
        (
            {"schedulingPolicy": {"gang": {"minCount": 0}}},
            None,
            "spec.schedulingPolicy.gang.minCount=0: must be >= 1",
        ),
        (
            GANG_OF_8,
            {"gpusched.io/topology-required": "island"},
            "annotation gpusched.io/topology-required='island':"
            " must be rack or spine or nvidia.com/gpu.clique",
        ),
    ],
)
def test_upstream_malformed(
    spec: dict[str, Any], annotations: dict[str, str] | None, problem: str
) -> None:
    assert pod_group_from_k8s(upstream(spec, annotations), W).problem == problem


def test_the_store_follows_adds_updates_and_deletes() -> None:
    changes: list[tuple[GangAPI, str, bool]] = []
    port = KubePodGroups(
        FakeKube(list),  # type: ignore[arg-type]
        on_change=lambda api, key, deleted: changes.append((api, key, deleted)),
    )
    watch = port.watches[X]
    first = pod_group_from_k8s(x_k8s(), X)
    watch.handler(EventType.ADDED, first)
    assert port.pod_group(X, "team-a/train") == first
    assert port.pod_group(W, "team-a/train") is None  # the other API's namesake
    bigger = pod_group_from_k8s(x_k8s({"minMember": 6}), X)
    watch.handler(EventType.MODIFIED, bigger)
    assert port.pod_group(X, "team-a/train") == bigger
    # A deletion of an older object of the same name (a stale event) changes nothing.
    stale = PodGroupSpec(key="team-a/train", api=X, min_member=1, uid="old-uid")
    watch.handler(EventType.DELETED, stale)
    assert port.pod_group(X, "team-a/train") == bigger
    watch.handler(EventType.DELETED, bigger)
    assert port.pod_group(X, "team-a/train") is None
    assert changes == [
        (X, "team-a/train", False),
        (X, "team-a/train", False),
        (X, "team-a/train", True),
    ]
    assert {r.path for r in port.reflectors} == {
        "/apis/scheduling.x-k8s.io/v1alpha1/podgroups",
        "/apis/scheduling.k8s.io/v1alpha2/podgroups",
    }
    assert all(r.optional for r in port.reflectors)


async def test_an_unserved_api_leaves_the_port_synced_and_running() -> None:
    kube = FakeKube(list, list_status=404)
    port = KubePodGroups(kube)  # type: ignore[arg-type]
    task = asyncio.create_task(port.run())
    await asyncio.wait_for(port.wait_synced(), 5)
    assert all(r.unserved for r in port.reflectors)
    assert not task.done()  # the daemon would take an ended task for a dead watch
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize(
    ("mode", "want", "problem"),
    [
        (None, "", ""),
        ("Pod", "Pod", ""),
        ("PodGroup", "PodGroup", ""),
        ("Whole", "", "spec.disruptionMode='Whole': must be Pod or PodGroup"),
    ],
)
def test_upstream_disruption_mode(mode: str | None, want: str, problem: str) -> None:
    spec = {**GANG_OF_8, **({"disruptionMode": mode} if mode is not None else {})}
    g = pod_group_from_k8s(upstream(spec), W)
    assert (g.disruption_mode, g.problem) == (want, problem)
