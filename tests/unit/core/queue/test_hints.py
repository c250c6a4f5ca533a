"""What a node update changed, as the requeue hints see it."""

from __future__ import annotations

import dataclasses

import pytest

from gpusched.core.queue import ClusterEvent, NodeChange, may_help, node_change
from gpusched.model.node import Card, NodeModel, Taint
from tests.builders import gpu_node, node

BASE = node("n", taints=[("a", "1", "NoSchedule")], cards=2)
CARD0 = Card(0, "A100", 81920)


@pytest.mark.parametrize(
    ("new", "expected"),
    [
        (dataclasses.replace(BASE, labels={"nvidia.com/gfd.timestamp": "1"}), NodeChange.NONE),
        (dataclasses.replace(BASE, warnings=("x",), gpu_source="gfd"), NodeChange.NONE),
        (dataclasses.replace(BASE, cpu_milli=BASE.cpu_milli + 1), NodeChange.ALLOCATABLE),
        (dataclasses.replace(BASE, memory_bytes=BASE.memory_bytes + 1), NodeChange.ALLOCATABLE),
        (dataclasses.replace(BASE, pods=BASE.pods + 1), NodeChange.ALLOCATABLE),
        (dataclasses.replace(BASE, cpu_milli=BASE.cpu_milli - 1), NodeChange.NONE),
        (dataclasses.replace(BASE, cards=(*BASE.cards, Card(2, "A100", 81920))), NodeChange.CARDS),
        (dataclasses.replace(BASE, cards=BASE.cards[:1]), NodeChange.NONE),
        (dataclasses.replace(BASE, cards=(CARD0, Card(1, "H100", 81920))), NodeChange.CARDS),
        (
            dataclasses.replace(BASE, cards=(CARD0, Card(1, "A100", 81920, healthy=False))),
            NodeChange.NONE,
        ),
        (dataclasses.replace(BASE, taints=()), NodeChange.TAINTS),
        (
            dataclasses.replace(BASE, taints=(Taint("a", "2", "NoSchedule"),)),
            NodeChange.TAINTS | NodeChange.TAINT_ADDED,
        ),
        (
            dataclasses.replace(BASE, taints=(*BASE.taints, Taint("b", "", "NoSchedule"))),
            NodeChange.TAINT_ADDED,
        ),
        (dataclasses.replace(BASE, unschedulable=True), NodeChange.NONE),
        (dataclasses.replace(BASE, rack="r1"), NodeChange.TOPOLOGY),
        # A device plugin registering rdma/hca after the node came up, or growing it.
        (dataclasses.replace(BASE, other=(("rdma/hca", 1),)), NodeChange.ALLOCATABLE),
    ],
)
def test_node_change(new: NodeModel, expected: NodeChange) -> None:
    assert node_change(BASE, new, labels_changed=False) == expected


def test_a_watched_label_and_a_healed_card_and_uncordon() -> None:
    sick = gpu_node("g", cards=1)
    sick = dataclasses.replace(sick, cards=(dataclasses.replace(sick.cards[0], healthy=False),))
    healed = dataclasses.replace(gpu_node("g", cards=1), unschedulable=False)
    cordoned = dataclasses.replace(sick, unschedulable=True)
    assert node_change(cordoned, healed, labels_changed=True) == (
        NodeChange.CARDS | NodeChange.SCHEDULABLE | NodeChange.LABELS
    )


def test_node_ports_and_node_name_rejections_wake_on_the_right_events() -> None:
    ports = frozenset({"NodePorts"})
    assert may_help(ports, ClusterEvent.ASSIGNED_POD_DELETE)  # a deleted pod frees its ports
    assert may_help(ports, ClusterEvent.NODE_ADD)
    assert not may_help(ports, ClusterEvent.NODE_UPDATE, NodeChange.ANY)
    name = frozenset({"NodeName"})
    assert may_help(name, ClusterEvent.NODE_ADD)  # the named node may appear
    assert not may_help(name, ClusterEvent.ASSIGNED_POD_DELETE)
    assert not may_help(name, ClusterEvent.NODE_UPDATE, NodeChange.ANY)


def test_an_added_taint_wakes_a_spread_rejection_but_not_a_taint_rejection() -> None:
    # With nodeTaintsPolicy Honor, a newly tainted node's domain leaves the spread's global
    # minimum, which may let the pod fit; a taint added never makes a pod tolerate a node.
    added = node_change(
        BASE,
        dataclasses.replace(BASE, taints=(*BASE.taints, Taint("b", "", "NoSchedule"))),
        labels_changed=False,
    )
    assert may_help(frozenset({"PodTopologySpread"}), ClusterEvent.NODE_UPDATE, added)
    assert not may_help(frozenset({"TaintToleration"}), ClusterEvent.NODE_UPDATE, added)
    assert not may_help(frozenset({"NodeResourcesFit"}), ClusterEvent.NODE_UPDATE, added)


def test_other_allocatable_grows_or_shrinks() -> None:
    two = dataclasses.replace(BASE, other=(("ephemeral-storage", 10), ("rdma/hca", 2)))
    more = dataclasses.replace(two, other=(("ephemeral-storage", 10), ("rdma/hca", 3)))
    less = dataclasses.replace(two, other=(("ephemeral-storage", 10),))
    assert node_change(two, more, labels_changed=False) == NodeChange.ALLOCATABLE
    assert node_change(two, less, labels_changed=False) == NodeChange.NONE
    assert node_change(two, two, labels_changed=False) == NodeChange.NONE


@pytest.mark.parametrize(
    "event",
    [
        ClusterEvent.PVC_CHANGE,
        ClusterEvent.PV_CHANGE,
        ClusterEvent.STORAGE_CLASS_CHANGE,
        ClusterEvent.CSI_NODE_CHANGE,
    ],
)
def test_storage_events_wake_only_pods_a_volume_plugin_rejected(event: ClusterEvent) -> None:
    assert may_help(frozenset({"VolumeBinding"}), event)
    assert may_help(frozenset({"NodeResourcesFit", "VolumeZone"}), event)
    assert may_help(frozenset(), event)  # a rejection naming no plugin
    assert not may_help(frozenset({"NodeResourcesFit"}), event)
    assert not may_help(frozenset({"GPUFit", "TaintToleration"}), event)


def test_volume_rejections_and_node_updates() -> None:
    # Volume node affinity and zones read labels; claims in use and CSI limits do not.
    assert may_help(frozenset({"VolumeBinding"}), ClusterEvent.NODE_UPDATE, NodeChange.LABELS)
    assert may_help(frozenset({"VolumeZone"}), ClusterEvent.NODE_UPDATE, NodeChange.LABELS)
    assert not may_help(frozenset({"VolumeZone"}), ClusterEvent.NODE_UPDATE, NodeChange.TAINTS)
    assert not may_help(
        frozenset({"VolumeRestrictions"}), ClusterEvent.NODE_UPDATE, NodeChange.LABELS
    )
    assert not may_help(frozenset({"NodeVolumeLimits"}), ClusterEvent.NODE_UPDATE, NodeChange.ANY)
    # A pod's deletion frees a ReadWriteOncePod claim or attachments, never a volume zone.
    assert may_help(frozenset({"VolumeRestrictions"}), ClusterEvent.ASSIGNED_POD_DELETE)
    assert may_help(frozenset({"NodeVolumeLimits"}), ClusterEvent.ASSIGNED_POD_DELETE)
    assert not may_help(frozenset({"VolumeZone"}), ClusterEvent.ASSIGNED_POD_DELETE)
    assert may_help(frozenset({"VolumeZone"}), ClusterEvent.NODE_ADD)


def test_inter_pod_affinity_rejections_wake_on_bound_pods_and_node_labels() -> None:
    ipa = frozenset({"InterPodAffinity"})
    assert may_help(ipa, ClusterEvent.ASSIGNED_POD_ADD)  # a pod its affinity selects
    assert may_help(ipa, ClusterEvent.ASSIGNED_POD_UPDATE)  # relabelled into a term
    assert may_help(ipa, ClusterEvent.ASSIGNED_POD_DELETE)  # an anti-affinity match gone
    assert may_help(ipa, ClusterEvent.NODE_ADD)
    assert may_help(ipa, ClusterEvent.NODE_UPDATE, NodeChange.LABELS)  # a topology key
    assert not may_help(ipa, ClusterEvent.NODE_UPDATE, NodeChange.ALLOCATABLE | NodeChange.TAINTS)
    # Filters that do not count pods by label ignore pods being bound or relabelled.
    fit = frozenset({"NodeResourcesFit", "GPUFit"})
    assert not may_help(fit, ClusterEvent.ASSIGNED_POD_ADD)
    assert not may_help(fit, ClusterEvent.ASSIGNED_POD_UPDATE)
    assert may_help(fit | ipa, ClusterEvent.ASSIGNED_POD_ADD)
    assert not may_help(frozenset(), ClusterEvent.ASSIGNED_POD_ADD)
