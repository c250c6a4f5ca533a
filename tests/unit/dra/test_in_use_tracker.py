"""InUseTracker: the incremental `in_use_from_claims` gives what a full recompute gives."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

from gpusched.dra.allocator import InUseTracker, in_use_from_claims
from gpusched.model.dra import ResourceClaim, resource_claim_from_k8s, resource_slice_from_k8s
from tests.dra_builders import gpu_claim, gpu_slice


def claim(name: str, device: int, share: str = "") -> ResourceClaim:
    result: dict[str, object] = {
        "request": "gpu",
        "driver": "gpu.nvidia.com",
        "pool": "node-a",
        "device": f"gpu-{device}",
    }
    if share:
        result["shareID"] = f"00000000-0000-0000-0000-0000000000{device}{len(name):01d}"
        result["consumedCapacity"] = {"memory": share}
    return resource_claim_from_k8s(gpu_claim(name, allocation={"devices": {"results": [result]}}))


def test_incremental_equals_full_recompute() -> None:
    slices = (resource_slice_from_k8s(gpu_slice("node-a", 4)),)
    tracker = InUseTracker()
    steps: list[tuple[ResourceClaim, ...]] = []
    a, b, c, d = claim("a", 0), claim("bb", 1, "1Gi"), claim("ccc", 1, "2Gi"), claim("d", 2)
    steps.append((a,))
    steps.append((a, b))
    steps.append((a, b, c, d))
    # b deallocated (a new claim object without allocation): a full recompute.
    steps.append((a, dataclasses.replace(b, allocation=None), c, d))
    steps.append((a, c))
    steps.append((a, c, b))
    for claims in steps:
        got = tracker.update(claims, slices)
        assert got == in_use_from_claims(claims, slices)
    # Not vacuous: shares of one device added up across increments.
    last = tracker.update(steps[-1], slices)
    [(device, per)] = last.consumed_capacity.items()
    assert device == ("gpu.nvidia.com", "node-a", "gpu-1")
    assert list(per.values()) == [Decimal(3 * 2**30)]
    assert last.devices == {("gpu.nvidia.com", "node-a", "gpu-0")}
