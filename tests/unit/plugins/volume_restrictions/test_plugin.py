"""VolumeRestrictions: ReadWriteOncePod claims and in-tree disk conflicts
(volume_restrictions_test.go's cases)."""

from __future__ import annotations

import pytest

from gpusched.framework import CycleState
from gpusched.framework.status import Code
from gpusched.model.volume import Disk, PodVolume
from gpusched.plugins.volume_restrictions import VolumeRestrictions
from gpusched.plugins.volume_restrictions.plugin import (
    REASON_DISK_CONFLICT,
    REASON_RWOP_CONFLICT,
    disks_conflict,
)
from tests.builders import (
    all_rows,
    claim,
    host,
    passing,
    pod,
    pvc_volume,
    reasons_by_node,
    snapshot,
)
from tests.fakes import FakeHandle, FakeVolumes


@pytest.mark.parametrize(
    ("new", "old", "conflict"),
    [
        (Disk("gce", "d"), Disk("gce", "d"), True),
        (Disk("gce", "d", True), Disk("gce", "d", True), False),  # both read-only
        (Disk("gce", "d", True), Disk("gce", "d"), True),
        (Disk("gce", "d"), Disk("gce", "e"), False),
        (Disk("aws", "v", True), Disk("aws", "v", True), True),  # EBS: never shared
        (Disk("iscsi", "iqn", True), Disk("iscsi", "iqn", True), False),
        (Disk("iscsi", "iqn"), Disk("iscsi", "iqn", True), True),
        (
            Disk("rbd", "p/i", False, frozenset({"m1", "m2"})),
            Disk("rbd", "p/i", False, frozenset({"m2"})),
            True,
        ),
        (
            Disk("rbd", "p/i", False, frozenset({"m1"})),
            Disk("rbd", "p/i", False, frozenset({"m3"})),
            False,
        ),
        (
            Disk("rbd", "p/i", True, frozenset({"m1"})),
            Disk("rbd", "p/i", True, frozenset({"m1"})),
            False,
        ),
        (Disk("gce", "d"), Disk("aws", "d"), False),
    ],
)
def test_disk_conflicts(new: Disk, old: Disk, conflict: bool) -> None:
    assert disks_conflict(new, old) is conflict


def test_skips_pods_without_disks_or_read_write_once_pod_claims() -> None:
    vols = FakeVolumes()
    vols.add(claim("rwo"))
    plugin = VolumeRestrictions(None, FakeHandle(snapshot(host("n1")), volumes=vols))
    assert plugin.pre_filter(CycleState(), pod("p"))[1].is_skip()
    assert plugin.pre_filter(CycleState(), pod("p", volumes=(pvc_volume("rwo"),)))[1].is_skip()


def test_a_missing_claim_is_unresolvable() -> None:
    plugin = VolumeRestrictions(None, FakeHandle(snapshot(host("n1")), volumes=FakeVolumes()))
    _, st = plugin.pre_filter(CycleState(), pod("p", volumes=(pvc_volume("nope"),)))
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.reasons == ('persistentvolumeclaim "nope" not found',)


def test_a_read_write_once_pod_claim_in_use_fails_every_node() -> None:
    vols = FakeVolumes()
    vols.add(claim("solo", modes=("ReadWriteOncePod",)))
    snap = snapshot(host("n1"), host("n2"))
    holder = pod("holder", node_name="n1", volumes=(pvc_volume("solo"),))
    handle = FakeHandle(snap, volumes=vols)
    plugin = VolumeRestrictions(None, handle)
    want = pod("want", volumes=(pvc_volume("solo"),))
    state = CycleState()
    assert plugin.pre_filter(state, want)[1].is_skip()  # nobody uses it yet
    handle.pods["n1"] = [holder]
    state = CycleState()
    assert plugin.pre_filter(state, want)[1].is_success()
    mask = all_rows(snap)
    res = plugin.filter(state, want, mask)
    assert passing(snap, res) == []
    assert reasons_by_node(snap, mask, res) == {
        "n1": REASON_RWOP_CONFLICT,
        "n2": REASON_RWOP_CONFLICT,
    }
    assert not res.unresolvable  # preempting the holder helps


def test_a_disk_mounted_read_write_on_a_node_excludes_it() -> None:
    snap = snapshot(host("n1"), host("n2"))
    handle = FakeHandle(snap, volumes=FakeVolumes())
    handle.pods["n2"] = [
        pod("old", node_name="n2", volumes=(PodVolume("pd", disk=Disk("gce", "d")),))
    ]
    plugin = VolumeRestrictions(None, handle)
    want = pod("want", volumes=(PodVolume("pd", disk=Disk("gce", "d")),))
    state = CycleState()
    assert plugin.pre_filter(state, want)[1].is_success()
    mask = all_rows(snap)
    res = plugin.filter(state, want, mask)
    assert passing(snap, res) == ["n1"]
    assert reasons_by_node(snap, mask, res) == {"n2": REASON_DISK_CONFLICT}
