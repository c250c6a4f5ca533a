"""VolumeZone: bound volumes' zone and region labels against the nodes'
(volume_zone_test.go's cases)."""

from __future__ import annotations

import pytest

from gpusched.framework import CycleState
from gpusched.framework.status import Code
from gpusched.plugins.volume_zone import VolumeZone
from gpusched.plugins.volume_zone.plugin import REASON, Topology, node_fits, zones
from tests.builders import (
    all_rows,
    bound_claim,
    claim,
    node,
    passing,
    pod,
    pv,
    pvc_volume,
    snapshot,
    storage_class,
)
from tests.fakes import FakeHandle, FakeVolumes

ZONE = "topology.kubernetes.io/zone"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"


@pytest.mark.parametrize(
    ("topology", "labels", "fits"),
    [
        (Topology("pv", ZONE, frozenset({"a"})), {}, True),  # a node without zone labels
        (Topology("pv", ZONE, frozenset({"a"})), {ZONE: "a"}, True),
        (Topology("pv", ZONE, frozenset({"a"})), {ZONE: "b"}, False),
        (Topology("pv", ZONE, frozenset({"a", "b"})), {ZONE: "b"}, True),
        (Topology("pv", BETA_ZONE, frozenset({"a"})), {ZONE: "a"}, True),  # beta -> GA
        (Topology("pv", ZONE, frozenset({"a"})), {BETA_ZONE: "a"}, False),  # not GA -> beta
        (Topology("pv", REGION, frozenset({"r"})), {ZONE: "a"}, False),  # region missing
    ],
)
def test_node_fits(topology: Topology, labels: dict[str, str], fits: bool) -> None:
    assert node_fits((topology,), labels) is fits


def test_multi_zone_label_values() -> None:
    assert zones("a__b") == frozenset({"a", "b"})
    assert zones(" a ") == frozenset({"a"})
    assert zones("a____b") is None


def filter_nodes(vols: FakeVolumes) -> tuple[list[str], CycleState, VolumeZone]:
    snap = snapshot(node("na", labels={ZONE: "a"}), node("nb", labels={ZONE: "b"}), node("plain"))
    plugin = VolumeZone(None, FakeHandle(snap, volumes=vols))
    state = CycleState()
    want = pod("p", volumes=(pvc_volume("data"),))
    _, st = plugin.pre_filter(state, want)
    assert st.is_success(), st
    res = plugin.filter(state, want, all_rows(snap))
    assert res.reasons == (REASON,) and res.unresolvable is True
    return passing(snap, res), state, plugin


def test_a_bound_zonal_volume_keeps_the_pod_in_its_zone() -> None:
    vols = FakeVolumes()
    vols.add(bound_claim("data", "pv1"), pv("pv1", labels={ZONE: "b"}, phase="Bound"))
    ok, _, _ = filter_nodes(vols)
    assert ok == ["nb", "plain"]


@pytest.mark.parametrize(
    ("objs", "outcome"),
    [
        ((), 'persistentvolumeclaim "data" not found'),
        ((bound_claim("data", "gone"),), 'persistentvolume "gone" not found'),
        ((claim("data", ""),), "PersistentVolumeClaim had no pv name and storageClass name"),
        ((claim("data", "nope"),), 'storageclass.storage.k8s.io "nope" not found'),
        (
            (claim("data", "std"), storage_class("std", "x", mode="Immediate")),
            "PersistentVolume had no name",
        ),
        ((claim("data"), storage_class()), "skip"),  # WaitForFirstConsumer: VolumeBinding's
        ((bound_claim("data", "pv1"), pv("pv1", phase="Bound")), "skip"),  # no zone labels
    ],
)
def test_pre_filter(objs: tuple[object, ...], outcome: str) -> None:
    vols = FakeVolumes()
    vols.add(*objs)  # type: ignore[arg-type]
    plugin = VolumeZone(None, FakeHandle(snapshot(node("n")), volumes=vols))
    _, st = plugin.pre_filter(CycleState(), pod("p", volumes=(pvc_volume("data"),)))
    if outcome == "skip":
        assert st.is_skip()
    else:
        assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE and st.reasons == (outcome,)
