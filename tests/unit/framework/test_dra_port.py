"""The DRA port's shared state (framework/dra.py): indexes, the version, in-flight and
written-but-unseen claims, and MemoryDra's writes with kube-scheduler's semantics."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Coroutine
from typing import Any, TypeVar

from gpusched.framework.dra import (
    NO_DRA,
    DraPort,
    DraWriteError,
    MemoryDra,
    rv_at_least,
)
from gpusched.framework.status import Code, Status
from gpusched.model.dra import (
    FINALIZER,
    AllocationResult,
    ConsumerRef,
    DeviceResult,
    ResourceClaim,
    device_class_from_k8s,
    resource_claim_from_k8s,
    resource_slice_from_k8s,
)
from gpusched.model.pod import PodInfo, PodRequest
from tests.dra_builders import DRIVER, gpu_allocation, gpu_claim, gpu_class, gpu_slice

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def pod(name: str = "p", uid: str = "pod-uid") -> PodInfo:
    return PodInfo(uid=uid, namespace="ns", name=name, request=PodRequest())


def claim(name: str = "c", **kw: Any) -> ResourceClaim:
    return resource_claim_from_k8s(gpu_claim(name, **kw))


def ours(node: str, *devices: int) -> AllocationResult:
    return AllocationResult(
        results=tuple(DeviceResult("gpu", DRIVER, node, f"gpu-{i}") for i in devices)
    )


def test_ports_satisfy_the_protocol() -> None:
    ports: list[DraPort] = [NO_DRA, MemoryDra()]
    assert [p.claim("ns", "c") for p in ports] == [None, None]


def test_indexes_and_the_version_follow_every_change() -> None:
    dra = MemoryDra()
    v0 = dra.version
    dra.put_class(device_class_from_k8s(gpu_class()))
    a = resource_slice_from_k8s(gpu_slice("node-a"))
    b = resource_slice_from_k8s(gpu_slice("node-b", 4))
    fabric = dataclasses.replace(
        resource_slice_from_k8s(gpu_slice("x", 1)), uid="fabric", node_name="", all_nodes=True
    )
    for s in (a, b, fabric):
        dra.put_slice(s)
    assert dra.version == v0 + 4
    assert dra.device_class("gpu.nvidia.com") is not None
    assert list(dra.slices()) == [a, b, fabric]
    assert dra.slices_for_node("node-a") == (a, fabric)
    assert dra.slices_for_node("node-z") == (fabric,)
    assert dra.pools()[(DRIVER, "node-b")] == (b,)
    # Cached until something changes, then recomputed.
    assert dra.slices() is dra.slices()
    moved = dataclasses.replace(a, node_name="node-c", resource_version="2")
    dra.put_slice(moved)
    assert dra.slices_for_node("node-a") == (fabric,)
    assert dra.slices_for_node("node-c") == (moved, fabric)
    dra.remove_slice(moved)
    assert moved not in dra.slices() and "node-c" not in dra._by_node
    v = dra.version
    dra.remove_slice(moved)  # already gone: no change
    assert dra.version == v


def test_allocated_claims_include_other_schedulers_and_our_in_flight_ones() -> None:
    dra = MemoryDra()
    theirs = claim("theirs", allocation=gpu_allocation("node-a", 0))
    free = claim("free")
    dra.put_claim(theirs)
    dra.put_claim(free)
    assert dra.allocated_claims() == (theirs,)
    # Reserve decided on gpu-1 for "free": in use from now on.
    mine = dataclasses.replace(free, allocation=ours("node-a", 1))
    dra.assume(mine)
    assert list(dra.allocated_claims()) == [theirs, mine]
    assert dra.claim("ns", "free") == mine
    # A newer watch event (someone labelled the claim) does not drop it: our write may
    # still succeed on a fresh copy.
    dra.put_claim(dataclasses.replace(free, resource_version="7"))
    assert dra.claim("ns", "free") == mine
    dra.forget(free.uid)
    assert dra.allocated_claims() == (theirs,)
    assert dra.claim("ns", "free") is not None and dra.claim("ns", "free").allocation is None  # type: ignore[union-attr]


def test_a_written_claim_stands_until_the_watch_shows_it() -> None:
    dra = MemoryDra()
    free = claim("free", rv="5")
    dra.put_claim(free)
    written = dataclasses.replace(free, allocation=ours("node-a", 0), resource_version="9")
    dra._wrote(written)
    assert dra.claim("ns", "free") == written
    # An older event (the watch is behind) changes nothing.
    dra.put_claim(dataclasses.replace(free, resource_version="8"))
    assert dra.claim("ns", "free") == written and dra.allocated_claims() == (written,)
    # The watch shows our write: the watched object is the truth again.
    seen = dataclasses.replace(written, resource_version="9")
    dra.put_claim(seen)
    assert dra.written == {} and dra.claim("ns", "free") is seen
    assert rv_at_least("10", "9") and not rv_at_least("9", "10") and rv_at_least("x", "x")


def test_allocate_writes_finalizer_allocation_and_reservation() -> None:
    dra = MemoryDra()
    free = claim("free")
    dra.put_claim(free)
    dra.assume(dataclasses.replace(free, allocation=ours("node-a", 2)))
    written, status = run(dra.allocate(free, ours("node-a", 2), pod()))
    assert status.is_success() and written is not None
    # The finalizer in its own write first, then allocation + reservedFor in one.
    assert dra.writes == [("finalizer", "ns/free"), ("allocate", "ns/free")]
    assert written.finalizers == (FINALIZER,)
    assert (
        written.allocation is not None and written.allocation.results == ours("node-a", 2).results
    )
    assert written.allocation.allocation_timestamp  # stamped, as bindClaim does in 1.36
    assert written.reserved_for == (ConsumerRef("pods", "p", "pod-uid"),)
    assert dra.inflight == {} and dra.claim("ns", "free") == written


def test_allocate_after_a_benign_change_retries_on_the_fresh_claim() -> None:
    dra = MemoryDra()
    free = claim("free", rv="1")
    dra.put_claim(dataclasses.replace(free, resource_version="2"))  # labelled meanwhile
    written, status = run(dra.allocate(free, ours("node-a", 0), pod()))
    assert status.is_success() and written is not None and written.allocation is not None


def test_allocate_fails_when_the_claim_was_allocated_elsewhere_or_deleted() -> None:
    dra = MemoryDra()
    free = claim("free", rv="1")
    dra.assume(dataclasses.replace(free, allocation=ours("node-a", 0)))
    theirs = claim("free", rv="2", allocation=gpu_allocation("node-b", 3))
    dra.put_claim(theirs)
    written, status = run(dra.allocate(free, ours("node-a", 0), pod()))
    assert written is None and status.code is Code.ERROR
    assert status.message() == "claim ns/free got allocated elsewhere in the meantime"
    assert isinstance(status.error, DraWriteError) and status.error.status == 409
    assert not status.error.final
    # Nothing half-written, and our in-flight allocation is over.
    assert dra.writes == [] and dra.claim("ns", "free") == theirs and dra.inflight == {}
    gone, status = run(dra.allocate(claim("other"), ours("node-a", 0), pod()))
    assert gone is None and "got deleted in the meantime" in status.message()
    deleting = dataclasses.replace(claim("d"), deleting=True)
    dra.put_claim(deleting)
    assert "deleted" in run(dra.allocate(deleting, ours("node-a", 0), pod()))[1].message()


def test_reserve_for_a_shared_claim_and_unreserve() -> None:
    dra = MemoryDra()
    shared = claim(
        "shared",
        allocation=gpu_allocation("node-a", 0),
        reserved_for=[{"resource": "pods", "name": "first", "uid": "first-uid"}],
    )
    dra.put_claim(shared)
    written, status = run(dra.reserve_for(shared, pod()))
    assert status.is_success() and written is not None
    assert [c.uid for c in written.reserved_for] == ["first-uid", "pod-uid"]
    # Reserving twice is a no-op, not a duplicate entry.
    again, status = run(dra.reserve_for(written, pod()))
    assert again == written and dra.writes == [("reserve", "ns/shared")]
    assert run(dra.unreserve(written, pod())) == Status()
    now = dra.claim("ns", "shared")
    assert now is not None and [c.uid for c in now.reserved_for] == ["first-uid"]
    # The allocation stays (kube's Unreserve leaves it; PostFilter may deallocate).
    assert now.allocation is not None
    # Reserving an unallocated claim fails as bindClaim does.
    dra.put_claim(claim("bare"))
    _, status = run(dra.reserve_for(claim("bare"), pod()))
    assert status.message() == "claim ns/bare got deallocated elsewhere in the meantime"


def test_unreserve_gives_up_the_in_flight_allocation() -> None:
    dra = MemoryDra()
    free = claim("free")
    dra.put_claim(free)
    dra.assume(dataclasses.replace(free, allocation=ours("node-a", 0)))
    assert dra.allocated_claims()
    assert run(dra.unreserve(free, pod())).is_success()
    assert dra.allocated_claims() == () and dra.writes == []


def test_deallocate_clears_an_allocation_only_the_pod_uses() -> None:
    dra = MemoryDra()
    mine = claim("mine", allocation=gpu_allocation("node-a", 0))
    dra.put_claim(mine)
    assert run(dra.deallocate(mine, pod())).is_success()
    now = dra.claim("ns", "mine")
    assert now is not None and now.allocation is None and dra.allocated_claims() == ()
    used = claim(
        "used",
        allocation=gpu_allocation("node-a", 1),
        reserved_for=[{"resource": "pods", "name": "other", "uid": "other-uid"}],
    )
    dra.put_claim(used)
    status = run(dra.deallocate(used, pod()))
    assert status.code is Code.ERROR and "in use by other" in status.message()
    stale = dataclasses.replace(mine, resource_version="0")
    assert "has been modified" in run(dra.deallocate(stale, pod())).message()


def test_no_dra_holds_nothing_and_refuses_writes() -> None:
    assert NO_DRA.allocated_claims() == () and NO_DRA.slices_for_node("n") == ()
    _, status = run(NO_DRA.allocate(claim(), ours("n", 0), pod()))
    assert status.code is Code.ERROR


def test_a_gone_pod_releases_its_claims_as_the_resourceclaim_controller_does() -> None:
    dra = MemoryDra(now=lambda: "2026-12-01T00:00:00Z")
    mine, shared = (
        claim("mine"),
        claim(
            "shared",
            allocation=gpu_allocation("node-a", 1),
            reserved_for=[{"resource": "pods", "name": "other", "uid": "other-uid"}],
        ),
    )
    dra.put_claim(mine)
    dra.put_claim(shared)
    written, _ = run(dra.allocate(mine, ours("node-a", 0), pod()))
    assert written is not None and written.allocation is not None
    assert written.allocation.allocation_timestamp == "2026-12-01T00:00:00Z"
    run(dra.reserve_for(shared, pod()))
    dra.pod_gone("pod-uid")
    after_mine, after_shared = dra.claim("ns", "mine"), dra.claim("ns", "shared")
    assert after_mine is not None and after_mine.allocation is None
    assert after_mine.finalizers == () and after_mine.reserved_for == ()
    # Still used by another pod: only the reservation goes.
    assert after_shared is not None and after_shared.allocation is not None
    assert [c.uid for c in after_shared.reserved_for] == ["other-uid"]
