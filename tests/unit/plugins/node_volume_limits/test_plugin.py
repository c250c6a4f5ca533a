"""NodeVolumeLimits: CSINode attach limits per driver (csi_test.go's cases)."""

from __future__ import annotations

from gpusched.framework import CycleState
from gpusched.model.volume import CSINode, PodVolume
from gpusched.plugins.node_volume_limits import NodeVolumeLimits
from gpusched.plugins.node_volume_limits.plugin import REASON
from tests.builders import (
    all_rows,
    bound_claim,
    claim,
    host,
    passing,
    pod,
    pv,
    pvc_volume,
    reasons_by_node,
    snapshot,
    storage_class,
)
from tests.fakes import FakeHandle, FakeVolumes

DRIVER = "ebs.csi.aws.com"


def csi_pv(name: str) -> object:
    return pv(name, phase="Bound", csi_driver=DRIVER, csi_handle=f"h-{name}")


def cluster() -> tuple[FakeHandle, FakeVolumes]:
    vols = FakeVolumes()
    for i in range(4):
        vols.add(bound_claim(f"c{i}", f"pv{i}"), csi_pv(f"pv{i}"))  # type: ignore[arg-type]
    vols.add(CSINode("n1", {DRIVER: 2}), CSINode("n2", {"other.csi": 1}))
    handle = FakeHandle(snapshot(host("n1"), host("n2"), host("n3")), volumes=vols)
    # Two pods on n1 attach c0 and c1; n2 and n3 hold the same pods' volumes too.
    for n in ("n1", "n2", "n3"):
        handle.pods[n] = [
            pod(f"a-{n}", node_name=n, volumes=(pvc_volume("c0"),)),
            pod(f"b-{n}", node_name=n, volumes=(pvc_volume("c1"),)),
        ]
    return handle, vols


def test_skips_pods_without_claims() -> None:
    handle, _ = cluster()
    plugin = NodeVolumeLimits(None, handle)
    assert plugin.pre_filter(CycleState(), pod("p"))[1].is_skip()
    assert plugin.pre_filter(CycleState(), pod("p", volumes=(pvc_volume("c2"),)))[1].is_success()


def test_a_node_at_its_driver_limit_is_rejected() -> None:
    handle, _ = cluster()
    plugin = NodeVolumeLimits(None, handle)
    want = pod("p", volumes=(pvc_volume("c2"),))
    mask = all_rows(handle.snapshot)
    res = plugin.filter(CycleState(), want, mask)
    # n1 allows 2 EBS volumes and has 2; n2 limits another driver only; n3 has no CSINode.
    assert passing(handle.snapshot, res) == ["n2", "n3"]
    assert reasons_by_node(handle.snapshot, mask, res) == {"n1": REASON}
    assert not res.unresolvable


def test_a_volume_already_attached_to_the_node_counts_once() -> None:
    handle, _ = cluster()
    plugin = NodeVolumeLimits(None, handle)
    shared = pod("p", volumes=(pvc_volume("c0"),))
    assert passing(
        handle.snapshot, plugin.filter(CycleState(), shared, all_rows(handle.snapshot))
    ) == [
        "n1",
        "n2",
        "n3",
    ]


def test_unbound_claims_count_by_their_class_provisioner() -> None:
    handle, vols = cluster()
    vols.add(claim("new", "ebs"), storage_class("ebs", DRIVER))
    plugin = NodeVolumeLimits(None, handle)
    res = plugin.filter(
        CycleState(), pod("p", volumes=(pvc_volume("new"),)), all_rows(handle.snapshot)
    )
    assert passing(handle.snapshot, res) == ["n2", "n3"]


def test_missing_claim_is_unresolvable_everywhere() -> None:
    handle, _ = cluster()
    plugin = NodeVolumeLimits(None, handle)
    res = plugin.filter(
        CycleState(), pod("p", volumes=(pvc_volume("nope"),)), all_rows(handle.snapshot)
    )
    assert passing(handle.snapshot, res) == []
    assert res.reasons == ('looking up PVC ns/nope: persistentvolumeclaim "nope" not found',)
    assert res.unresolvable is True
    other = pod("q", volumes=(PodVolume("s", "q-s", ephemeral=True),))
    handle.volumes.add(claim("q-s", controller_uid="not-q"))  # type: ignore[attr-defined]
    res2 = plugin.filter(CycleState(), other, all_rows(handle.snapshot))
    assert res2.reasons == ("PVC ns/q-s was not created for pod ns/q (pod is not owner)",)
