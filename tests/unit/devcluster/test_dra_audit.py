"""The DRA audit on hand-built API objects (slices from the NVIDIA-shaped fixtures): each
violation kind, once kept and once broken."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from gpusched.devcluster.dra_audit import DraState, check
from gpusched.devcluster.dra_fixtures import (
    DRIVER,
    GPU_CLASS,
    MIG_CLASS,
    PCIE_ROOT,
    DraNode,
    device_classes,
    partitionable_slices,
    shared_gpu_slices,
    standard_slices,
)

JSON = dict[str, Any]
NODE = "node-a"


def named(slices: list[JSON]) -> list[JSON]:
    for i, s in enumerate(slices):
        s["metadata"]["name"] = f"{s['metadata']['generateName']}{i}"
    return slices


def result(device: str, request: str = "gpu", pool: str = NODE, **extra: Any) -> JSON:
    return {"request": request, "driver": DRIVER, "pool": pool, "device": device, **extra}


def on_node(node: str) -> JSON:
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }


def claim(
    name: str,
    results: list[JSON] | None,
    *,
    count: int = 1,
    requests: list[JSON] | None = None,
    constraints: list[JSON] | None = None,
    reserved: tuple[str, ...] = (),
    node: str = NODE,
) -> JSON:
    spec_requests = requests or [
        {"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS, "count": count}}
    ]
    obj: JSON = {
        "metadata": {"namespace": "ns", "name": name},
        "spec": {"devices": {"requests": spec_requests, "constraints": constraints or []}},
        "status": {},
    }
    if results is not None:
        obj["status"]["allocation"] = {
            "devices": {"results": results},
            "nodeSelector": on_node(node),
        }
        obj["status"]["reservedFor"] = [
            {"resource": "pods", "name": uid, "uid": uid} for uid in reserved
        ]
    return obj


def pod(name: str, node: str, claims: dict[str, str], phase: str = "Running") -> JSON:
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": name},
        "spec": {
            "nodeName": node,
            "resourceClaims": [{"name": k, "resourceClaimName": v} for k, v in claims.items()],
        },
        "status": {"phase": phase},
    }


def state(
    claims: list[JSON], *, slices: list[JSON] | None = None, pods: Sequence[JSON] = ()
) -> DraState:
    nodes = [{"metadata": {"name": n, "labels": {}}} for n in (NODE, "node-b")]
    return DraState(
        claims=claims,
        slices=slices if slices is not None else named(standard_slices(DraNode(NODE, 4))),
        classes=device_classes(),
        pods=list(pods),
        nodes=nodes,
    )


def kinds(s: DraState) -> list[str]:
    return sorted(v.kind for v in check(s))


def test_a_correct_allocation_reserved_for_its_running_pod_passes() -> None:
    s = state(
        [claim("c", [result("gpu-0")], reserved=("p",))],
        pods=[pod("p", NODE, {"gpu": "c"})],
    )
    assert check(s) == []


def test_a_device_in_two_claims_is_a_double_allocation_unless_admin_access() -> None:
    twice = state([claim("a", [result("gpu-1")]), claim("b", [result("gpu-1")])])
    [violation] = check(twice)
    assert violation.kind == "double-allocation"
    assert violation.subject == f"{DRIVER}/{NODE}/gpu-1"
    assert "ns/a" in violation.message and "ns/b" in violation.message
    admin = state([claim("a", [result("gpu-1")]), claim("b", [result("gpu-1", adminAccess=True)])])
    assert check(admin) == []


def test_a_shareable_device_is_limited_by_the_consumed_capacity() -> None:
    slices = named(shared_gpu_slices(DraNode(NODE, 1)))  # 81559Mi of memory
    share = {"consumedCapacity": {"memory": "39Gi"}}
    two = [claim(f"s{i}", [result("gpu-0", shareID=f"id{i}", **share)]) for i in range(2)]
    assert check(state(two, slices=slices)) == []
    three = [claim(f"s{i}", [result("gpu-0", shareID=f"id{i}", **share)]) for i in range(3)]
    assert kinds(state(three, slices=slices)) == ["over-capacity"]


def test_partitions_are_limited_by_the_shared_counters() -> None:
    slices = named(partitionable_slices(DraNode(NODE, 1, product="A100-SXM4-80GB")))
    mig = [{"name": "mig", "exactly": {"deviceClassName": MIG_CLASS}}]
    halves = [
        claim(f"m{i}", [result(f"gpu-0-mig-3g40gb-9-{start}", "mig")], requests=mig)
        for i, start in enumerate((0, 4))
    ]
    assert check(state(halves, slices=slices)) == []
    whole = claim("full", [result("gpu-0")])
    found = check(state([*halves, whole], slices=slices))
    assert {v.kind for v in found} == {"over-counter"}
    assert any("memory-slice-0" in v.message for v in found)


def test_a_result_outside_the_current_pool_generation_is_unknown() -> None:
    old = named(standard_slices(DraNode(NODE, 8)))
    new = named(standard_slices(DraNode(NODE, 4)))
    new[0]["spec"]["pool"]["generation"] = 2
    new[0]["metadata"]["name"] += "-new"
    s = state([claim("c", [result("gpu-6")])], slices=old + new)
    [violation] = check(s)
    assert violation.kind == "unknown-device" and "generation 2" in violation.message
    assert kinds(state([claim("c", [result("gpu-0", pool="elsewhere")])])) == ["unknown-device"]


def test_results_must_answer_the_requests() -> None:
    assert kinds(state([claim("c", [result("gpu-0")], count=2)])) == ["wrong-count"]
    assert kinds(state([claim("c", [result("gpu-0", "other")])])) == [
        "wrong-count",
        "wrong-count",
    ]  # an unknown request, and "gpu" unanswered
    first = [
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "two", "deviceClassName": GPU_CLASS, "count": 2},
                {"name": "one", "deviceClassName": GPU_CLASS},
            ],
        }
    ]
    good = claim("c", [result("gpu-0", "gpu/one")], requests=first)
    assert check(state([good])) == []
    mixed = claim("c", [result("gpu-0", "gpu/one"), result("gpu-1", "gpu/two")], requests=first)
    assert kinds(state([mixed])) == ["wrong-count"]
    short = claim("c", [result("gpu-0", "gpu/two")], requests=first)
    assert kinds(state([short])) == ["wrong-count"]


def test_match_and_distinct_attribute_constraints() -> None:
    same_root = [{"matchAttribute": PCIE_ROOT}]
    pair = claim("c", [result("gpu-0"), result("gpu-1")], count=2, constraints=same_root)
    assert check(state([pair])) == []
    split = claim("c", [result("gpu-0"), result("gpu-2")], count=2, constraints=same_root)
    assert kinds(state([split])) == ["constraint"]
    missing = [{"matchAttribute": f"{DRIVER}/partition2"}]  # no Fabric Manager attributes
    lacking = claim("c", [result("gpu-0"), result("gpu-1")], count=2, constraints=missing)
    assert kinds(state([lacking])) == ["constraint"]
    distinct = [{"distinctAttribute": PCIE_ROOT}]
    spread = claim("c", [result("gpu-0"), result("gpu-2")], count=2, constraints=distinct)
    assert check(state([spread])) == []
    same = claim("c", [result("gpu-0"), result("gpu-1")], count=2, constraints=distinct)
    assert kinds(state([same])) == ["constraint"]


def test_a_pod_on_another_node_than_the_allocation_is_wrong_node() -> None:
    c = claim("c", [result("gpu-0")], reserved=("p",))
    assert kinds(state([c], pods=[pod("p", "node-b", {"gpu": "c"})])) == ["wrong-node"]
    # The nodeSelector allows node-b, but the device is node-a's.
    c = claim("c", [result("gpu-0")], reserved=("p",), node="node-b")
    found = check(state([c], pods=[pod("p", "node-b", {"gpu": "c"})]))
    assert [v.kind for v in found] == ["wrong-node"] and "node-a" in found[0].message


def test_a_running_pod_needs_its_claims_allocated_and_reserved() -> None:
    running = pod("p", NODE, {"gpu": "c"})
    assert kinds(state([claim("c", [result("gpu-0")])], pods=[running])) == ["unreserved"]
    assert kinds(state([claim("c", None)], pods=[running])) == ["unreserved"]
    assert kinds(state([], pods=[running])) == ["unreserved"]
    pending = pod("p", NODE, {"gpu": "c"}, phase="Pending")
    assert check(state([claim("c", None)], pods=[pending])) == []
    templated = copy.deepcopy(running)
    templated["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    templated["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "c"}]
    assert check(state([claim("c", [result("gpu-0")], reserved=("p",))], pods=[templated])) == []


def test_a_request_for_a_missing_class_is_reported() -> None:
    requests = [{"name": "gpu", "exactly": {"deviceClassName": "nope"}}]
    assert kinds(state([claim("c", [result("gpu-0")], requests=requests)])) == ["unknown-class"]
