"""Parsing resource.k8s.io/v1 DeviceClasses, ResourceSlices and ResourceClaims, writing an
allocation back, and a pod's resourceClaims resolved against its status."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

from gpusched.model.dra import (
    AllocationMode,
    AllocationResult,
    Attribute,
    AttributeKind,
    Capacity,
    CapacityPolicy,
    ConsumerRef,
    DeviceResult,
    PodClaim,
    Toleration,
    allocation_to_k8s,
    consumer_to_k8s,
    device_class_from_k8s,
    format_quantity,
    pod_consumer,
    resource_claim_from_k8s,
    resource_slice_from_k8s,
)
from gpusched.model.pod import pod_from_k8s
from tests.dra_builders import DRIVER, gpu_allocation, gpu_claim, gpu_class, gpu_slice

GIB = Decimal(2**30)


def test_an_nvidia_slice_parses_with_typed_qualified_attributes_and_capacity() -> None:
    s = resource_slice_from_k8s(gpu_slice("node-a"))
    assert s.errors == ()
    assert (s.driver, s.pool, s.pool_generation, s.pool_slice_count) == (DRIVER, "node-a", 1, 1)
    assert s.node_name == "node-a" and not s.all_nodes and s.node_selector is None
    assert [d.name for d in s.devices] == [f"gpu-{i}" for i in range(8)]
    gpu3 = s.devices[3]
    assert gpu3.attributes["gpu.nvidia.com/index"] == Attribute(AttributeKind.INT, 3)
    assert gpu3.attributes["gpu.nvidia.com/type"] == Attribute(AttributeKind.STRING, "gpu")
    assert gpu3.attributes["gpu.nvidia.com/productName"].value == "NVIDIA A100-SXM4-80GB"
    assert gpu3.attributes["gpu.nvidia.com/driverVersion"] == Attribute(
        AttributeKind.VERSION, "570.133.20"
    )
    assert gpu3.attributes["gpu.nvidia.com/cudaComputeCapability"].kind is AttributeKind.VERSION
    # A name with its own domain keeps it.
    assert gpu3.attributes["resource.kubernetes.io/pcieRoot"].value == "pci0000:00"
    assert gpu3.capacity == {"gpu.nvidia.com/memory": Capacity(80 * GIB)}
    assert (s.uid, s.resource_version) == ("uid-slice-node-a", "1")


def test_consumable_capacity_partitionable_devices_taints_and_binding_conditions() -> None:
    raw = gpu_slice("node-a", 1)
    dev = raw["spec"]["devices"][0]
    dev["allowMultipleAllocations"] = True
    dev["capacity"]["memory"]["requestPolicy"] = {
        "default": "10Gi",
        "validRange": {"min": "1Gi", "max": "80Gi", "step": "1Gi"},
    }
    dev["capacity"]["dra.example.com/slots"] = {
        "value": "4",
        "requestPolicy": {"default": "1", "validValues": ["2", "1", "4"]},
    }
    dev["consumesCounters"] = [
        {"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "40Gi"}}}
    ]
    dev["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
    dev["bindsToNode"] = True
    dev["bindingConditions"] = ["Attached"]
    dev["bindingFailureConditions"] = ["AttachFailed"]
    s = resource_slice_from_k8s(raw)
    assert s.errors == ()
    d = s.devices[0]
    assert d.allow_multiple_allocations and d.binds_to_node
    assert d.capacity["gpu.nvidia.com/memory"].policy == CapacityPolicy(
        default=10 * GIB, valid_range_min=GIB, valid_range_max=80 * GIB, valid_range_step=GIB
    )
    assert d.capacity["dra.example.com/slots"].policy == CapacityPolicy(
        default=Decimal(1), valid_values=(Decimal(1), Decimal(2), Decimal(4))
    )
    assert d.consumes_counters[0].counter_set == "gpu-0-counters"
    assert d.consumes_counters[0].counters == {"memory": 40 * GIB}
    assert d.taints[0].key == "gpu.nvidia.com/xid" and d.taints[0].effect == "NoSchedule"
    assert (d.binding_conditions, d.binding_failure_conditions) == (
        ("Attached",),
        ("AttachFailed",),
    )


def test_shared_counters_and_per_device_node_selection() -> None:
    counters = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "counters", "uid": "u1", "resourceVersion": "5"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": "fabric", "generation": 3, "resourceSliceCount": 2},
            "allNodes": True,
            "sharedCounters": [
                {
                    "name": "gpu-0-counters",
                    "counters": {"memory": {"value": "80Gi"}, "sm": {"value": "98"}},
                }
            ],
        },
    }
    s = resource_slice_from_k8s(counters)
    assert s.errors == () and s.all_nodes and s.devices == ()
    assert s.shared_counters[0].counters == {"memory": 80 * GIB, "sm": Decimal(98)}
    per = gpu_slice("x", 2)
    del per["spec"]["nodeName"]
    per["spec"]["perDeviceNodeSelection"] = True
    per["spec"]["devices"][0]["nodeName"] = "node-a"
    per["spec"]["devices"][1]["allNodes"] = True
    p = resource_slice_from_k8s(per)
    assert p.errors == () and p.per_device_node_selection
    assert (p.devices[0].node_name, p.devices[1].all_nodes) == ("node-a", True)


def test_a_malformed_slice_records_every_fault_and_never_raises() -> None:
    raw: dict[str, Any] = gpu_slice("node-a", 2)
    raw["spec"]["allNodes"] = True  # and nodeName: two node selections
    raw["spec"]["pool"]["resourceSliceCount"] = 0
    dev = raw["spec"]["devices"][0]
    dev["attributes"]["index"] = {"int": "3"}
    dev["attributes"]["driverVersion"] = {"version": "570"}
    dev["attributes"]["both"] = {"int": 1, "string": "1"}
    dev["capacity"]["memory"] = {"value": "lots"}
    raw["spec"]["devices"][1]["name"] = "gpu-0"  # a duplicate
    s = resource_slice_from_k8s(raw)
    text = "\n".join(s.errors)
    for fault in (
        "exactly one is required",
        "resourceSliceCount=0",
        "'index'].int='3' is not an integer",
        "'570' is not a semantic version",
        "sets int and string",
        "capacity['memory'].value",
        "'gpu-0' appears twice",
    ):
        assert fault in text, fault
    # Garbage of every shape: errors, no exception.
    for junk in (
        {},
        {"spec": []},
        {"spec": {"devices": "x"}},
        {"metadata": 3, "spec": {"pool": 1}},
    ):
        assert resource_slice_from_k8s(junk).errors


def test_list_attributes_of_the_alpha_gate_are_left_out_not_refused() -> None:
    raw = gpu_slice("node-a", 1)
    raw["spec"]["devices"][0]["attributes"]["models"] = {"strings": ["a", "b"]}
    s = resource_slice_from_k8s(raw)
    assert s.errors == () and "gpu.nvidia.com/models" not in s.devices[0].attributes


def test_device_class() -> None:
    c = device_class_from_k8s(gpu_class())
    assert c.errors == () and c.name == "gpu.nvidia.com"
    assert c.selectors == (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
    )
    raw = gpu_class()
    raw["spec"]["config"] = [
        {
            "opaque": {
                "driver": DRIVER,
                "parameters": {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"},
            }
        }
    ]
    raw["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    raw["spec"]["selectors"].append({"somethingNew": {}})
    c = device_class_from_k8s(raw)
    assert c.config[0]["opaque"] == raw["spec"]["config"][0]["opaque"]
    assert c.extended_resource_name == "nvidia.com/gpu"
    # An unknown selector kind would widen the selection if dropped: it is an error.
    assert c.errors == ("spec.selectors[1] has no cel.expression",)


def test_a_claim_with_exactly_and_defaults() -> None:
    c = resource_claim_from_k8s(gpu_claim("train", count=0))
    assert c.errors == () and c.key == "ns/train" and c.allocation is None
    (req,) = c.requests
    assert req.name == "gpu" and not req.first_available
    (sub,) = req.alternatives
    # exactly: one alternative named like the request; count 0 (omitted) means 1.
    assert (sub.name, sub.device_class, sub.mode, sub.count) == (
        "gpu",
        "gpu.nvidia.com",
        AllocationMode.EXACT_COUNT,
        1,
    )


def test_a_claim_with_first_available_constraints_tolerations_capacity_and_config() -> None:
    raw = gpu_claim("infer")
    raw["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    raw["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "gpus"}
    raw["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "pod-uid", "controller": True}
    ]
    raw["spec"]["devices"] = {
        "requests": [
            {
                "name": "gpu",
                "firstAvailable": [
                    {
                        "name": "big",
                        "deviceClassName": "gpu.nvidia.com",
                        "selectors": [
                            {
                                "cel": {
                                    "expression": "device.capacity['gpu.nvidia.com'].memory"
                                    ".compareTo(quantity('80Gi')) >= 0"
                                }
                            }
                        ],
                        "count": 2,
                    },
                    {
                        "name": "shared",
                        "deviceClassName": "gpu.nvidia.com",
                        "capacity": {"requests": {"memory": "20Gi"}},
                        "tolerations": [
                            {
                                "key": "gpu.nvidia.com/xid",
                                "operator": "Exists",
                                "effect": "NoSchedule",
                            }
                        ],
                    },
                ],
            },
            {
                "name": "all",
                "exactly": {
                    "deviceClassName": "gpu.nvidia.com",
                    "allocationMode": "All",
                    "adminAccess": True,
                },
            },
        ],
        "constraints": [{"requests": ["gpu"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}],
        "config": [
            {
                "requests": ["gpu"],
                "opaque": {
                    "driver": DRIVER,
                    "parameters": {"sharing": {"strategy": "TimeSlicing"}},
                },
            }
        ],
    }
    c = resource_claim_from_k8s(raw)
    assert c.errors == ()
    gpu, every = c.requests
    assert gpu.first_available and [s.name for s in gpu.alternatives] == ["big", "shared"]
    big, shared = gpu.alternatives
    assert big.count == 2 and big.selectors[0].startswith("device.capacity")
    assert not big.admin_access  # firstAvailable has no adminAccess
    assert shared.capacity_requests == {"memory": 20 * GIB}  # unqualified: the allocator's
    assert shared.tolerations == (Toleration("gpu.nvidia.com/xid", "Exists", "", "NoSchedule"),)
    (alt,) = every.alternatives
    assert alt.mode is AllocationMode.ALL and alt.admin_access
    (con,) = c.constraints
    assert con.requests == ("gpu",) and con.match_attribute == "resource.kubernetes.io/pcieRoot"
    assert c.config[0]["requests"] == ["gpu"]
    assert c.finalizers == ("resource.kubernetes.io/delete-protection",)
    assert (c.owner_pod_uid, c.pod_claim_name) == ("pod-uid", "gpus")


def test_malformed_requests_are_refused_with_reasons() -> None:
    raw = gpu_claim("bad")
    raw["spec"]["devices"]["requests"] = [
        {
            "name": "a",
            "exactly": {"deviceClassName": "c"},
            "firstAvailable": [{"name": "x", "deviceClassName": "c"}],
        },
        {"name": "b", "exactly": {"deviceClassName": "c", "allocationMode": "Some"}},
        {"name": "c", "exactly": {"deviceClassName": "c", "count": -1}},
        {"name": "d", "exactly": {}},
        {"name": "e", "exactly": {"deviceClassName": "c"}},
        {"name": "e", "exactly": {"deviceClassName": "c"}},
    ]
    raw["spec"]["devices"]["constraints"] = [
        {"matchAttribute": "pcieRoot"},
        {"matchAttribute": "a/b", "distinctAttribute": "a/c"},
    ]
    c = resource_claim_from_k8s(raw)
    assert [r.name for r in c.requests] == ["e"]
    text = "\n".join(c.errors)
    for fault in (
        "(a) must set exactly one of exactly and firstAvailable",
        "allocationMode='Some': must be ExactCount or All",
        "count=-1",
        "(d).exactly.deviceClassName is missing",
        "request name 'e' appears twice",
        "'pcieRoot' must include its domain",
        "exactly one of matchAttribute and distinctAttribute",
    ):
        assert fault in text, fault


def test_an_allocated_claim_with_shares_consumed_capacity_and_reservations() -> None:
    alloc = gpu_allocation("node-a", 0, 1)
    alloc["devices"]["results"][1].update(
        shareID="9c4b1e6a-2b8f-4d6e-9a51-3f0c7d2e8b10",
        consumedCapacity={"memory": "20Gi"},
        tolerations=[{"key": "k", "operator": "Exists"}],
        adminAccess=False,
        bindingConditions=["Attached"],
    )
    alloc["devices"]["config"] = [
        {"source": "FromClass", "opaque": {"driver": DRIVER, "parameters": {}}}
    ]
    alloc["allocationTimestamp"] = "2026-12-01T10:00:00Z"
    pod = {"resource": "pods", "name": "p", "uid": "pod-uid"}
    raw = gpu_claim("train", count=2, rv="42", allocation=alloc, reserved_for=[pod])
    raw["status"]["devices"] = [
        {
            "driver": DRIVER,
            "pool": "node-a",
            "device": "gpu-1",
            "shareID": "9c4b1e6a-2b8f-4d6e-9a51-3f0c7d2e8b10",
            "conditions": [
                {"type": "Attached", "status": "True", "reason": "Ok", "message": ""},
                {"type": "Ready", "status": "False", "reason": "Wait", "message": ""},
            ],
        }
    ]
    c = resource_claim_from_k8s(raw)
    assert c.errors == () and c.resource_version == "42"
    assert c.allocation is not None
    r0, r1 = c.allocation.results
    assert r0.device_id == (DRIVER, "node-a", "gpu-0") and r0.share_id == ""
    assert r1.share_id == "9c4b1e6a-2b8f-4d6e-9a51-3f0c7d2e8b10"
    # "The domain prefix may be omitted if it is the same as the driver name."
    assert r1.consumed_capacity == {"gpu.nvidia.com/memory": 20 * GIB}
    assert r1.tolerations == (Toleration("k", "Exists"),) and r1.binding_conditions == ("Attached",)
    assert c.allocation.node_selector == alloc["nodeSelector"]
    assert c.allocation.config[0]["source"] == "FromClass"
    assert c.allocation.allocation_timestamp == "2026-12-01T10:00:00Z"
    assert c.reserved_for == (ConsumerRef("pods", "p", "pod-uid"),)
    (ds,) = c.device_statuses
    assert ds.device_id == r1.device_id and ds.share_id == r1.share_id
    assert ds.conditions == {"Attached": "True", "Ready": "False"}


def test_an_unreadable_allocation_still_counts_as_allocated() -> None:
    c = resource_claim_from_k8s(gpu_claim("x", allocation={}))
    assert c.allocation == AllocationResult()
    raw = gpu_claim("y")
    raw["status"] = {"allocation": "junk"}
    c = resource_claim_from_k8s(raw)
    assert c.allocation == AllocationResult() and c.errors


def test_allocation_round_trips_through_the_api_shape() -> None:
    alloc = gpu_allocation("node-a", 0, 3)
    alloc["devices"]["results"][0].update(
        shareID="9c4b1e6a-2b8f-4d6e-9a51-3f0c7d2e8b10",
        consumedCapacity={"memory": "21474836480", "dra.example.com/bw": "500m"},
        tolerations=[
            {
                "key": "k",
                "operator": "Equal",
                "value": "v",
                "effect": "NoExecute",
                "tolerationSeconds": 30,
            }
        ],
        adminAccess=True,
        bindingConditions=["Attached"],
        bindingFailureConditions=["Failed"],
    )
    alloc["devices"]["config"] = [
        {
            "source": "FromClaim",
            "requests": ["gpu"],
            "opaque": {"driver": DRIVER, "parameters": {"a": 1}},
        }
    ]
    alloc["allocationTimestamp"] = "2026-12-01T10:00:00Z"
    parsed = resource_claim_from_k8s(gpu_claim("c", allocation=copy.deepcopy(alloc))).allocation
    assert parsed is not None
    assert allocation_to_k8s(parsed) == alloc
    assert (
        resource_claim_from_k8s(gpu_claim("c", allocation=allocation_to_k8s(parsed))).allocation
        == parsed
    )


def test_writing_an_allocation_the_allocator_made() -> None:
    result = DeviceResult(
        "gpu",
        DRIVER,
        "node-a",
        "gpu-2",
        consumed_capacity={"gpu.nvidia.com/memory": Decimal("1.5")},
    )
    out = allocation_to_k8s(AllocationResult(results=(result,)))
    assert out == {
        "devices": {
            "results": [
                {
                    "request": "gpu",
                    "driver": DRIVER,
                    "pool": "node-a",
                    "device": "gpu-2",
                    # The driver's own domain is written as the slice spells it.
                    "consumedCapacity": {"memory": "1500m"},
                }
            ]
        }
    }
    assert [format_quantity(Decimal(v)) for v in ("85899345920", "0.5", "0.0005")] == [
        "85899345920",
        "500m",
        "0.0005",
    ]
    assert consumer_to_k8s(pod_consumer("p", "u")) == {"resource": "pods", "name": "p", "uid": "u"}
    assert consumer_to_k8s(ConsumerRef("podgroups", "g", "u", "scheduling.k8s.io"))["apiGroup"] == (
        "scheduling.k8s.io"
    )


def _pod(
    claims: list[dict[str, Any]], statuses: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"containers": [{"name": "c"}], "resourceClaims": claims},
        "status": {},
    }
    if statuses is not None:
        pod["status"]["resourceClaimStatuses"] = statuses
    return pod


def test_pod_claims_resolve_names_templates_and_statuses() -> None:
    spec = [
        {"name": "shared", "resourceClaimName": "team-gpus"},
        {"name": "gpus", "resourceClaimTemplateName": "one-gpu"},
        {"name": "nic", "resourceClaimTemplateName": "rdma"},
    ]
    # Before the resourceclaim controller ran: the template claims are not made yet.
    before = pod_from_k8s(_pod(spec))
    assert before.pod_claims == (
        PodClaim("shared", claim="team-gpus"),
        PodClaim("gpus", template="one-gpu"),
        PodClaim("nic", template="rdma"),
    )
    assert before.resource_claims == ("shared", "gpus", "nic")  # the names, as before
    after = pod_from_k8s(
        _pod(
            spec,
            [
                {"name": "gpus", "resourceClaimName": "p-gpus-8xk2q"},
                # The controller decided no claim is needed (a null name).
                {"name": "nic"},
            ],
        )
    )
    assert after.errors == ()
    assert after.pod_claims == (
        PodClaim("shared", claim="team-gpus"),
        PodClaim("gpus", claim="p-gpus-8xk2q", template="one-gpu"),
        PodClaim("nic", template="rdma", not_needed=True),
    )


def test_a_pod_claim_with_neither_source_has_neither() -> None:
    pod = pod_from_k8s(
        _pod(
            [
                {"name": "x"},
                {"name": "y", "resourceClaimName": "a", "resourceClaimTemplateName": "b"},
            ]
        )
    )
    # resourceclaim.Name's ErrAPIUnsupported: the plugin refuses such an entry.
    assert pod.pod_claims == (PodClaim("x"), PodClaim("y")) and pod.errors == ()
