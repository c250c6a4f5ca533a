"""Storage objects parsed as the API and component-helpers read them."""

from __future__ import annotations

from gpusched.model.pod import pod_from_k8s
from gpusched.model.selector import Requirement
from gpusched.model.volume import (
    Disk,
    NodeSelectorTerm,
    PodVolume,
    TopologyTerm,
    claim_from_k8s,
    csi_node_from_k8s,
    storage_class_from_k8s,
    topology_matches,
    volume_from_k8s,
)


def test_claim_fields_and_the_beta_class_annotation_winning() -> None:
    c = claim_from_k8s(
        {
            "metadata": {
                "name": "data",
                "namespace": "ns",
                "uid": "u1",
                "resourceVersion": "7",
                "annotations": {"volume.beta.kubernetes.io/storage-class": "beta"},
                "ownerReferences": [
                    {"uid": "other"},
                    {"uid": "pod-uid", "controller": True},
                ],
            },
            "spec": {
                "storageClassName": "ga",
                "accessModes": ["ReadWriteOncePod"],
                "resources": {"requests": {"storage": "10Gi"}},
                "selector": {
                    "matchLabels": {"tier": "fast"},
                    "matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}],
                },
            },
            "status": {"phase": "Pending"},
        }
    )
    assert (c.key, c.uid, c.resource_version) == ("ns/data", "u1", "7")
    assert c.storage_class == "beta"
    assert c.request == 10 * 2**30
    assert c.volume_mode == "Filesystem"
    assert c.controller_uid == "pod-uid"
    assert c.selector is not None
    assert c.selector.matches({"tier": "fast"})  # NotIn holds for an absent key
    assert not c.selector.matches({"tier": "fast", "zone": "b"})
    assert not c.selector.matches({"tier": "slow"})
    assert not c.fully_bound and c.selected_node is None and not c.errors


def test_claim_fully_bound_needs_volume_name_and_bind_completed() -> None:
    raw = {
        "metadata": {"name": "c", "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": {"volumeName": "pv1"},
    }
    assert claim_from_k8s(raw).fully_bound
    raw["metadata"] = {"name": "c"}
    assert not claim_from_k8s(raw).fully_bound


def test_malformed_claim_fields_become_errors_not_exceptions() -> None:
    c = claim_from_k8s(
        {
            "metadata": {"name": "c"},
            "spec": {
                "resources": {"requests": {"storage": "lots"}},
                "selector": {"matchExpressions": [{"key": "k", "operator": "Near"}]},
            },
        }
    )
    assert len(c.errors) == 2
    assert "spec.resources.requests.storage" in c.errors[0]
    assert "Unsupported value: 'Near'" in c.errors[1]


def test_volume_affinity_claim_ref_and_csi() -> None:
    pv = volume_from_k8s(
        {
            "metadata": {"name": "pv1", "labels": {"topology.kubernetes.io/zone": "a"}},
            "spec": {
                "storageClassName": "local",
                "capacity": {"storage": "100Gi"},
                "accessModes": ["ReadWriteOnce"],
                "volumeMode": "Block",
                "claimRef": {"namespace": "ns", "name": "data"},
                "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/hostname",
                                        "operator": "In",
                                        "values": ["n1"],
                                    }
                                ]
                            },
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": ["n2"]}
                                ]
                            },
                        ]
                    }
                },
            },
            "status": {"phase": "Bound"},
        }
    )
    assert pv.capacity == 100 * 2**30 and pv.volume_mode == "Block" and pv.phase == "Bound"
    assert (pv.csi_driver, pv.csi_handle) == ("ebs.csi.aws.com", "vol-1")
    assert pv.node_matches({"kubernetes.io/hostname": "n1"}, "x")
    assert pv.node_matches({}, "n2")  # matchFields on the node's name
    assert not pv.node_matches({"kubernetes.io/hostname": "n3"}, "n3")
    assert pv.claim_ref is not None and pv.claim_ref.uid == ""
    data = claim_from_k8s({"metadata": {"name": "data", "namespace": "ns", "uid": "u"}})
    assert pv.bound_to(data)  # a claimRef without uid binds any claim of that name
    other = claim_from_k8s({"metadata": {"name": "data", "namespace": "other"}})
    assert not pv.bound_to(other)


def test_volume_without_node_affinity_fits_every_node() -> None:
    pv = volume_from_k8s({"metadata": {"name": "nfs"}, "spec": {"capacity": {"storage": "1Ti"}}})
    assert pv.node_affinity is None and pv.node_matches({}, "any")


def test_an_empty_node_selector_term_matches_nothing() -> None:
    assert not NodeSelectorTerm().matches({"k": "v"}, "n")
    unknown_field = NodeSelectorTerm(fields=(Requirement("metadata.uid", "In", frozenset("x")),))
    assert not unknown_field.matches({}, "n")


def test_storage_class_defaults_and_topologies() -> None:
    sc = storage_class_from_k8s({"metadata": {"name": "std"}, "provisioner": "csi.x"})
    assert sc.binding_mode == "Immediate" and not sc.delayed and sc.allowed_topologies == ()
    wffc = storage_class_from_k8s(
        {
            "metadata": {"name": "local"},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [
                {"matchLabelExpressions": [{"key": "zone", "values": ["a", "b"]}]}
            ],
        }
    )
    assert wffc.delayed
    assert wffc.allowed_topologies == (TopologyTerm((("zone", frozenset({"a", "b"})),)),)
    assert topology_matches(wffc.allowed_topologies, {"zone": "a"})
    assert not topology_matches(wffc.allowed_topologies, {"zone": "c"})
    assert topology_matches((), {})


def test_csi_node_limits_only_for_drivers_with_a_count() -> None:
    csi = csi_node_from_k8s(
        {
            "metadata": {"name": "n1"},
            "spec": {
                "drivers": [
                    {"name": "a", "allocatable": {"count": 3}},
                    {"name": "b"},
                    {"name": "c", "allocatable": {"count": "many"}},
                ]
            },
        }
    )
    assert csi.limits == {"a": 3}


def test_pod_volumes_claims_ephemeral_and_disks() -> None:
    pod = pod_from_k8s(
        {
            "metadata": {"name": "web", "namespace": "ns", "uid": "u"},
            "spec": {
                "containers": [],
                "volumes": [
                    {
                        "name": "data",
                        "persistentVolumeClaim": {"claimName": "c1", "readOnly": True},
                    },
                    {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                    {"name": "cfg", "configMap": {"name": "x"}},
                    {"name": "pd", "gcePersistentDisk": {"pdName": "disk-1"}},
                    {"name": "img", "rbd": {"image": "i", "monitors": ["m1"], "readOnly": True}},
                ],
            },
        }
    )
    assert pod.volumes == (
        PodVolume("data", "c1", read_only=True),
        PodVolume("scratch", "web-scratch", ephemeral=True),
        PodVolume("pd", disk=Disk("gce", "disk-1")),
        PodVolume(
            "img",
            disk=Disk("rbd", "rbd/i", True, frozenset({"m1"})),
            read_only=True,
        ),
    )
