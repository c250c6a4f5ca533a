"""KubeDra's watch handlers: the view they keep and the changes they report for
requeueing (the writes are exercised against the real API server in
tests/integration/test_dra_port.py)."""

from __future__ import annotations

import dataclasses

from gpusched.framework.dra import CLAIMS, CLASSES, SLICES, DraChange
from gpusched.kube.dra import KubeDra
from gpusched.kube.watch import EventType
from gpusched.model.dra import (
    device_class_from_k8s,
    resource_claim_from_k8s,
    resource_slice_from_k8s,
)
from tests.dra_builders import gpu_allocation, gpu_claim, gpu_class, gpu_slice


def dra() -> tuple[KubeDra, list[DraChange]]:
    seen: list[DraChange] = []
    # The reflectors are built but never run here: the handlers are driven directly.
    return KubeDra(None, on_change=seen.append), seen  # type: ignore[arg-type]


def test_the_three_watches_are_optional_resource_k8s_io_v1_collections() -> None:
    kd, _ = dra()
    assert [r.path for r in kd.reflectors] == [
        "/apis/resource.k8s.io/v1/deviceclasses",
        "/apis/resource.k8s.io/v1/resourceslices",
        "/apis/resource.k8s.io/v1/resourceclaims",
    ]
    assert all(r.optional for r in kd.reflectors)


def test_classes_and_slices_are_kept_and_reported() -> None:
    kd, seen = dra()
    v = kd.version
    kd._on_class(EventType.ADDED, device_class_from_k8s(gpu_class()))
    rs = resource_slice_from_k8s(gpu_slice("node-a"))
    kd._on_slice(EventType.ADDED, rs)
    assert kd.device_class("gpu.nvidia.com") is not None and kd.slices_for_node("node-a") == (rs,)
    kd._on_slice(EventType.DELETED, rs)
    kd._on_class(EventType.DELETED, device_class_from_k8s(gpu_class()))
    assert kd.slices() == () and kd.device_class("gpu.nvidia.com") is None
    assert kd.version == v + 4
    # Deletions of classes and slices make no pod schedulable: not reported.
    assert seen == [
        DraChange(CLASSES, "", "gpu.nvidia.com"),
        DraChange(SLICES, "", rs.name, node="node-a"),
    ]


def test_claim_changes_say_what_changed() -> None:
    kd, seen = dra()
    free = resource_claim_from_k8s(gpu_claim("c", rv="1"))
    kd._on_claim(EventType.ADDED, free)
    labelled = dataclasses.replace(free, resource_version="2")
    kd._on_claim(EventType.MODIFIED, labelled)
    allocated = resource_claim_from_k8s(
        gpu_claim("c", rv="3", allocation=gpu_allocation("node-a", 0))
    )
    kd._on_claim(EventType.MODIFIED, allocated)
    kd._on_claim(EventType.MODIFIED, dataclasses.replace(labelled, resource_version="4"))
    kd._on_claim(EventType.MODIFIED, allocated)
    kd._on_claim(EventType.DELETED, allocated)
    assert seen == [
        DraChange(CLAIMS, "ns", "c", created=True, status_changed=True),
        DraChange(CLAIMS, "ns", "c"),
        DraChange(CLAIMS, "ns", "c", status_changed=True),
        DraChange(CLAIMS, "ns", "c", deallocated=True, status_changed=True),
        DraChange(CLAIMS, "ns", "c", status_changed=True),
        # An allocated claim deleted frees its devices.
        DraChange(CLAIMS, "ns", "c", deallocated=True, deleted=True),
    ]
    assert kd.claim("ns", "c") is None and kd.allocated_claims() == ()
