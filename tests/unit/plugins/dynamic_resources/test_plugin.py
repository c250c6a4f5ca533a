"""DynamicResources through the simulator with the in-memory DRA port (MemoryDra): the
path the product runs (PodExpander, PreEnqueue, PreFilter, Filter, GPUFit's cards, Reserve,
PreBind writes, Unreserve, PostFilter, the ledger charging the cards)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from decimal import Decimal
from typing import Any, ClassVar

from gpusched.config import builtin_profile
from gpusched.config.profile import PluginRef
from gpusched.core.schedule_one import Decision, Result
from gpusched.framework.cycle_state import CycleState
from gpusched.framework.dra import CLAIMS, CLASSES, DraChange, MemoryDra
from gpusched.framework.points import Point
from gpusched.framework.status import Code, Status
from gpusched.model.dra import (
    FINALIZER,
    AllocationResult,
    ResourceClaim,
    device_class_from_k8s,
    resource_claim_from_k8s,
    resource_slice_from_k8s,
)
from gpusched.model.node import Card, NodeModel
from gpusched.model.pod import PodInfo, pod_from_k8s
from gpusched.plugins import default_registry
from gpusched.plugins.gpu_fit.plugin import DRA_ONLY, NOT_DRA
from gpusched.sim.engine import Simulation
from tests.dra_builders import gpu_allocation, gpu_claim, gpu_class, gpu_slice

GiB = 1024**3
MIB = Decimal(1024 * 1024)


def _raw(claims: list[dict[str, Any]] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "ai-scheduler",
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
    }
    if claims is not None:
        spec["resourceClaims"] = claims
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u-p"}, "spec": spec}


def test_claims_are_parsed_by_name() -> None:
    raw = _raw([{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}, {"name": "nic"}])
    assert pod_from_k8s(raw).resource_claims == ("gpu", "nic")
    assert pod_from_k8s(_raw(None)).resource_claims == ()
    assert pod_from_k8s(_raw("junk")).resource_claims == ()  # type: ignore[arg-type]


# -- the world -------------------------------------------------------------------------------


def dra_node(name: str) -> NodeModel:
    """A node with no cards of its own: its cards come from its ResourceSlices."""
    return NodeModel(
        name=name,
        cpu_milli=64_000,
        memory_bytes=512 * GiB,
        pods=110,
        labels={"kubernetes.io/hostname": name},
    )


def plugin_node(name: str, cards: int = 8) -> NodeModel:
    """A device-plugin node: cards from GPU Feature Discovery, no slices."""
    return dataclasses.replace(
        dra_node(name),
        cards=tuple(Card(i, "NVIDIA-A100-SXM4-80GB", 81920) for i in range(cards)),
        gpu_source="gfd",
        allocatable_gpus=cards,
    )


def shared_slice(node: str, gpus: int = 2) -> dict[str, Any]:
    """NVIDIA-shaped GPUs that may be allocated several times (consumable capacity)."""
    rs = gpu_slice(node, gpus)
    for d in rs["spec"]["devices"]:
        d["allowMultipleAllocations"] = True
    return rs


def world(
    *nodes: NodeModel,
    slices: Iterable[dict[str, Any]] | None = None,
    dra: MemoryDra | None = None,
    profile_edit: Any = None,
) -> tuple[Simulation, MemoryDra]:
    """The ai-scheduler profile over `nodes` with a MemoryDra holding NVIDIA's gpu.nvidia.com
    class and `slices` (by default 8 GPUs on every node without cards of its own)."""
    dra = dra or MemoryDra()
    if not dra.classes:
        dra.put_class(device_class_from_k8s(gpu_class()))
    nodes = nodes or (dra_node("n1"), dra_node("n2"))
    if slices is None:
        slices = [gpu_slice(n.name) for n in nodes if not n.cards]
    for rs in slices:
        dra.put_slice(resource_slice_from_k8s(rs))
    reg = default_registry()
    profile = builtin_profile("ai-scheduler", reg)
    if profile_edit is not None:
        profile = profile_edit(reg, profile)
    return Simulation(nodes, profile, reg, dra=dra), dra


def claim(dra: MemoryDra, raw: dict[str, Any]) -> ResourceClaim:
    c = resource_claim_from_k8s(raw)
    assert not c.errors, c.errors
    dra.put_claim(c)
    return c


def share_claim(name: str, memory: str = "40Gi") -> dict[str, Any]:
    raw = gpu_claim(name)
    raw["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"memory": memory}}
    return raw


def claimed(
    name: str,
    *claims: str,
    template: str = "",
    statuses: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> PodInfo:
    """A pod of ai-scheduler naming `claims` (one entry each), or one template claim."""
    entries: list[dict[str, Any]] = [
        {"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)
    ]
    if template:
        entries.append({"name": "gpu", "resourceClaimTemplateName": template})
    raw: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {
            "schedulerName": "ai-scheduler",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            "resourceClaims": entries,
            **extra.pop("spec", {}),
        },
        **extra,
    }
    if statuses is not None:
        raw["status"] = {"resourceClaimStatuses": statuses}
    return pod_from_k8s(raw)


def devices(dra: MemoryDra, name: str) -> list[str]:
    c = dra.claim("ns", name)
    assert c is not None and c.allocation is not None, f"claim {name} is not allocated"
    return [r.device for r in c.allocation.results]


def free(sim: Simulation, node: str) -> list[int]:
    snap = sim.snapshot
    row = snap.row_of(node)
    return [int(x) for x in snap.card_free_milli[row, : snap.node_card_count[row]]]


def free_mem(sim: Simulation, node: str) -> list[int]:
    snap = sim.snapshot
    row = snap.row_of(node)
    return [int(x) for x in snap.card_free_mem[row, : snap.node_card_count[row]]]


def settle(sim: Simulation) -> None:
    """Charge what the port holds now (the ledger syncs before every attempt)."""
    sim.schedule_one.dra_ledger.sync()


def reserved(dra: MemoryDra, name: str) -> list[str]:
    c = dra.claim("ns", name)
    assert c is not None
    return [r.name for r in c.reserved_for]


# -- allocation ------------------------------------------------------------------------------


def test_one_gpu_claim_is_allocated_written_and_its_card_charged() -> None:
    sim, dra = world()
    claim(dra, gpu_claim("one"))
    d = sim.submit(claimed("p", "one"))
    assert d.result is Result.SCHEDULED, d.message
    got = dra.claim("ns", "one")
    assert got is not None and got.allocation is not None
    (result,) = got.allocation.results
    assert (result.request, result.driver, result.pool) == ("gpu", "gpu.nvidia.com", d.node)
    assert got.allocation.node_selector is not None
    assert got.allocation.allocation_timestamp
    assert [(r.name, r.uid) for r in got.reserved_for] == [("p", "uid-p")]
    assert FINALIZER in got.finalizers
    # The finalizer first, then the allocation with the pod reserved, nothing else.
    assert dra.writes == [("finalizer", "ns/one"), ("allocate", "ns/one")]
    assert not dra.inflight
    # The claim holds the card; the pod itself holds none (no double charge).
    card = int(result.device.removeprefix("gpu-"))
    expected = [1000] * 8
    expected[card] = 0
    settle(sim)
    assert free(sim, d.node) == expected
    entry = sim.cache.get("uid-p")
    assert entry is not None and entry.alloc is not None and entry.alloc.cards == ()
    # The pod is shaped as a one-card GPU pod for GPUFit and GPUFragmentation.
    assert d.pod.gpu_from_claims and d.pod.request.gpu_cards == 1


def test_two_gpus_with_match_attribute_share_one_pcie_root() -> None:
    # Cards 0-3 are on PCIe root 00, 4-7 on 01 (tests/dra_builders.py). Another scheduler
    # holds gpu-0..2 and gpu-4..6: one free card per root, so two on one root do not fit.
    sim, dra = world(dra_node("n1"))
    claim(dra, gpu_claim("other", uid="u-other", allocation=gpu_allocation("n1", 0, 1, 2, 4, 5, 6)))
    pair = gpu_claim("pair", count=2)
    pair["spec"]["devices"]["constraints"] = [
        {"requests": ["gpu"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}
    ]
    claim(dra, pair)
    d = sim.submit(claimed("p", "pair"))
    assert d.result is Result.UNSCHEDULABLE
    assert "cannot allocate all claims" in d.message, d.message
    assert dra.claim("ns", "pair").allocation is None  # type: ignore[union-attr]
    # gpu-0..2 freed: root 00 has four free cards, root 01 one; the pair lands on root 00.
    claim(dra, gpu_claim("other", uid="u-other", rv="2", allocation=gpu_allocation("n1", 4, 5, 6)))
    sim.events.dra_changed(DraChange(CLAIMS, "ns", "other", deallocated=True))
    sim.advance(sim.clock() + 60)
    got = devices(dra, "pair")
    assert len(got) == 2 and all(int(g.removeprefix("gpu-")) < 4 for g in got), got
    # Without the constraint a 2-card pod could have taken gpu-3 and gpu-7; it did not.
    settle(sim)
    assert sum(1 for f in free(sim, "n1") if f == 0) == 5


def test_two_capacity_shares_pack_onto_one_card() -> None:
    sim, dra = world(dra_node("n1"), slices=[shared_slice("n1", 2)])
    claim(dra, share_claim("half-a"))
    claim(dra, share_claim("half-b"))
    claim(dra, share_claim("half-c"))
    a = sim.submit(claimed("a", "half-a"))
    b = sim.submit(claimed("b", "half-b"))
    assert a.result is Result.SCHEDULED and b.result is Result.SCHEDULED, (a.message, b.message)
    assert a.pod.request.gpu_mem_mib == 40 * 1024 and a.pod.request.gpu_cards == 0
    # Fragmentation-aware: the second half goes where the first is, not to the empty card.
    assert devices(dra, "half-a") == devices(dra, "half-b")
    for name in ("half-a", "half-b"):
        got = dra.claim("ns", name)
        assert got is not None and got.allocation is not None
        (r,) = got.allocation.results
        assert r.consumed_capacity == {"gpu.nvidia.com/memory": 40 * 1024 * MIB}
        assert r.share_id  # each share of a multi-allocation device is told apart
    ra = dra.claim("ns", "half-a").allocation.results[0]  # type: ignore[union-attr]
    rb = dra.claim("ns", "half-b").allocation.results[0]  # type: ignore[union-attr]
    assert ra.share_id != rb.share_id
    settle(sim)
    full = int(devices(dra, "half-a")[0].removeprefix("gpu-"))
    assert free(sim, "n1")[full] == 0 and free(sim, "n1")[1 - full] == 1000
    assert free_mem(sim, "n1")[full] == 0
    # A third half does not fit on the full card: it takes the other one.
    c = sim.submit(claimed("c", "half-c"))
    assert c.result is Result.SCHEDULED
    assert devices(dra, "half-c") == [f"gpu-{1 - full}"]


# -- claims from templates ---------------------------------------------------------------------


def template_claim(name: str, owner_uid: str) -> dict[str, Any]:
    raw = gpu_claim(name)
    raw["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner_uid, "controller": True}
    ]
    raw["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "gpu"}
    return raw


def test_a_template_claim_waits_until_made_then_the_pod_is_attempted() -> None:
    sim, dra = world()
    held: list[str] = []
    sim.queue.on_gated = lambda pod, st: held.append(st.message())
    bound: list[Decision] = []
    sim.on_bound(bound.append)
    # The resourceclaim controller has not made the claim: kube's message.
    assert sim.arrive(claimed("p", template="one-gpu")) is None
    assert held[-1] == 'pod "ns/p": ResourceClaim not created yet'
    # It names the claim in the pod's status before the informer has it.
    made = [{"name": "gpu", "resourceClaimName": "p-gpu-x7k2p"}]
    named = claimed("p", template="one-gpu", statuses=made)
    sim.events.pod_changed(named)
    sim.run()
    assert sim.queue.pre_enqueue is not None
    st = sim.queue.pre_enqueue(named)
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message() == 'resourceclaim.resource.k8s.io "p-gpu-x7k2p" not found'
    assert sim.queue.where("uid-p") == "gated" and not bound
    # The claim appears: the pod leaves PreEnqueue and is placed.
    claim(dra, template_claim("p-gpu-x7k2p", "uid-p"))
    sim.events.dra_changed(DraChange(CLAIMS, "ns", "p-gpu-x7k2p", created=True))
    sim.run()
    assert [d.pod.name for d in bound] == ["p"]
    assert len(devices(dra, "p-gpu-x7k2p")) == 1
    assert reserved(dra, "p-gpu-x7k2p") == ["p"]


def test_a_template_claim_of_another_pod_is_refused() -> None:
    sim, dra = world()
    held: list[str] = []
    sim.queue.on_gated = lambda pod, st: held.append(st.message())
    claim(dra, template_claim("p-gpu-x7k2p", "uid-someone-else"))
    made = [{"name": "gpu", "resourceClaimName": "p-gpu-x7k2p"}]
    assert sim.arrive(claimed("p", template="one-gpu", statuses=made)) is None
    assert held[-1] == (
        "ResourceClaim ns/p-gpu-x7k2p was not created for Pod ns/p (Pod is not owner)"
    )
    assert dra.writes == []


def test_a_template_entry_the_controller_says_is_not_needed_is_skipped() -> None:
    sim, dra = world()
    made = [{"name": "gpu", "resourceClaimName": None}]
    d = sim.submit(claimed("p", template="one-gpu", statuses=made))
    assert d.result is Result.SCHEDULED and not d.pod.gpu_from_claims
    assert dra.writes == []


# -- claims allocated earlier, shared claims, in-flight ------------------------------------------


def test_a_claim_allocated_for_another_node_is_deallocated_by_post_filter() -> None:
    # Allocated on n1 earlier (its pod went away) and n1 is now cordoned.
    sim, dra = world(dra_node("n1"), dra_node("n2"))
    sim.events.node_changed(dataclasses.replace(dra_node("n1"), unschedulable=True))
    claim(dra, gpu_claim("old", allocation=gpu_allocation("n1", 3)))
    settle(sim)
    assert free(sim, "n1")[3] == 0
    d = sim.submit(claimed("p", "old"))
    assert d.result is Result.UNSCHEDULABLE
    assert d.diagnosis is not None
    assert d.diagnosis.reasons == {
        "resourceclaim not available on the node": 1,
        "node(s) were unschedulable": 1,
    }, d.message
    # Nobody else holds it: PostFilter cleared the allocation.
    assert ("deallocate", "ns/old") in dra.writes
    got = dra.claim("ns", "old")
    assert got is not None and got.allocation is None
    settle(sim)
    assert free(sim, "n1")[3] == 1000
    # The deallocation wakes the pod; it is allocated afresh, on n2.
    bound: list[Decision] = []
    sim.on_bound(bound.append)
    sim.events.dra_changed(DraChange(CLAIMS, "ns", "old", deallocated=True))
    sim.advance(sim.clock() + 60)
    assert [(x.pod.name, x.node) for x in bound] == [("p", "n2")]
    assert dra.claim("ns", "old").allocation.results[0].pool == "n2"  # type: ignore[union-attr]


def test_a_claim_allocated_elsewhere_and_used_by_another_pod_is_not_deallocated() -> None:
    sim, dra = world(dra_node("n1"), dra_node("n2"))
    sim.events.node_changed(dataclasses.replace(dra_node("n1"), unschedulable=True))
    claim(
        dra,
        gpu_claim(
            "busy",
            allocation=gpu_allocation("n1", 0),
            reserved_for=[{"resource": "pods", "name": "q", "uid": "uid-q"}],
        ),
    )
    d = sim.submit(claimed("p", "busy"))
    assert d.result is Result.UNSCHEDULABLE
    assert not any(verb == "deallocate" for verb, _ in dra.writes)
    assert devices(dra, "busy") == ["gpu-0"]


def test_a_shared_claim_reserved_by_another_pod_is_joined_on_the_same_node() -> None:
    sim, dra = world()
    claim(dra, gpu_claim("shared"))
    a = sim.submit(claimed("a", "shared"))
    assert a.result is Result.SCHEDULED
    settle(sim)
    before = (free(sim, "n1"), free(sim, "n2"))
    b = sim.submit(claimed("b", "shared"))
    assert b.result is Result.SCHEDULED and b.node == a.node
    assert reserved(dra, "shared") == ["a", "b"]
    assert dra.writes[-1] == ("reserve", "ns/shared")
    # The claim holds its card once, however many pods use it.
    settle(sim)
    assert (free(sim, "n1"), free(sim, "n2")) == before
    assert not b.pod.gpu_from_claims  # nothing left to allocate: no GPU request of its own


def test_a_claim_being_allocated_for_another_pod_makes_the_pod_wait() -> None:
    sim, dra = world()
    raw = gpu_claim("shared")
    c = claim(dra, raw)
    # Another pod's cycle reserved an allocation that PreBind has not written yet.
    alloc = resource_claim_from_k8s(gpu_claim("x", allocation=gpu_allocation("n1", 0)))
    assert alloc.allocation is not None
    dra.assume(dataclasses.replace(c, allocation=alloc.allocation))
    d = sim.submit(claimed("p", "shared"))
    assert d.result is Result.UNSCHEDULABLE
    assert d.status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert d.message == (
        "0/2 nodes are available: resource claim ns/shared is in the process of being allocated."
    )
    assert dra.writes == []


# -- bad input ---------------------------------------------------------------------------------


def test_a_missing_device_class_makes_the_pod_wait_for_it() -> None:
    sim, dra = world()
    raw = gpu_claim("later")
    raw["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "later.example.com"
    claim(dra, raw)
    d = sim.submit(claimed("p", "later"))
    # kube's validateDeviceClass: unschedulable until a DeviceClass event.
    assert d.result is Result.UNSCHEDULABLE
    assert d.status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert d.message == (
        "0/2 nodes are available: request gpu: device class later.example.com does not exist."
    )
    assert dra.writes == [] and not dra.inflight
    later = gpu_class()
    later["metadata"]["name"] = "later.example.com"
    dra.put_class(device_class_from_k8s(later))
    bound: list[Decision] = []
    sim.on_bound(bound.append)
    sim.events.dra_changed(DraChange(CLASSES, "", "later.example.com"))
    sim.advance(sim.clock() + 60)
    assert [x.pod.name for x in bound] == ["p"]
    assert len(devices(dra, "later")) == 1


def test_a_bad_cel_selector_is_an_error_with_a_clear_message() -> None:
    sim, dra = world()
    raw = gpu_claim("bad-cel")
    raw["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName ==="}}
    ]
    claim(dra, raw)
    d = sim.submit(claimed("p", "bad-cel"))
    # Found once at PreFilter, not per node, and the attempt ends with an Error (kube's
    # Filter returns statusError for it).
    assert d.result is Result.ERROR, d.message
    assert d.status.code is Code.ERROR and d.status.plugin == "DynamicResources"
    assert d.message.startswith("claim ns/bad-cel: selector #0: CEL compile error:"), d.message
    assert "Syntax error" in d.message
    assert dra.writes == [] and not dra.inflight


def test_a_pod_asking_both_nvidia_gpu_and_claims_is_refused() -> None:
    sim, dra = world()
    claim(dra, gpu_claim("one"))
    both = claimed(
        "p",
        "one",
        spec={
            "containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
            ]
        },
    )
    assert both.request.gpu_cards == 1
    d = sim.submit(both)
    assert d.result is Result.UNSCHEDULABLE
    assert d.status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "both through resourceClaims and through nvidia.com/gpu" in d.message
    assert dra.writes == []


# -- one owner per card -------------------------------------------------------------------------


def gpu_pod(
    name: str, *, limits: dict[str, str] | None = None, annotations: dict[str, str] | None = None
) -> PodInfo:
    """A pod asking for GPUs the device-plugin way (nvidia.com/gpu) or by annotation."""
    return pod_from_k8s(
        {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": f"uid-{name}",
                "annotations": annotations or {},
            },
            "spec": {
                "schedulerName": "ai-scheduler",
                "containers": [{"name": "c", "resources": {"limits": limits or {}}}],
            },
        }
    )


def test_annotation_pods_never_land_on_dra_nodes_nor_claims_on_plugin_nodes() -> None:
    sim, _ = world(dra_node("dra"), plugin_node("plain"))
    assert bool(sim.snapshot.node_dra_cards[sim.snapshot.row_of("dra")])
    assert not sim.snapshot.node_dra_cards[sim.snapshot.row_of("plain")]
    # Fill the device-plugin node: the next GPU pod must not spill onto the DRA node.
    for i in range(8):
        d = sim.submit(gpu_pod(f"g{i}", limits={"nvidia.com/gpu": "1"}))
        assert (d.result, d.node) == (Result.SCHEDULED, "plain"), d.message
    over = sim.submit(gpu_pod("half", annotations={"gpusched.io/gpu-milli": "500"}))
    assert over.result is Result.UNSCHEDULABLE
    assert over.diagnosis is not None
    assert over.diagnosis.reasons.get(DRA_ONLY) == 1, over.message
    # A claim pod goes to the DRA node only, whatever the plugin node offers. A slice that
    # serves every node (another driver's) keeps the plain node a candidate of DRA's
    # PreFilter, so GPUFit is the one that says no.
    everywhere = {
        "metadata": {"name": "fabric", "uid": "uid-fabric", "resourceVersion": "1"},
        "spec": {
            "driver": "nic.example.com",
            "allNodes": True,
            "pool": {"name": "fabric", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "nic-0"}],
        },
    }
    sim2, dra2 = world(plugin_node("plain"), dra_node("dra"), slices=[gpu_slice("dra"), everywhere])
    claim(dra2, gpu_claim("one"))
    d2 = sim2.submit(claimed("p", "one"))
    assert (d2.result, d2.node) == (Result.SCHEDULED, "dra")
    assert devices(dra2, "one")[0].startswith("gpu-")
    # And with the DRA node full, not to the plugin node either.
    claim(dra2, gpu_claim("eight", count=8))
    d3 = sim2.submit(claimed("q", "eight"))
    assert d3.result is Result.UNSCHEDULABLE
    assert d3.diagnosis is not None
    assert d3.diagnosis.reasons.get(NOT_DRA) == 1, d3.message


# -- binding-cycle failures ---------------------------------------------------------------------


class RacingDra(MemoryDra):
    """A MemoryDra where another scheduler allocates the claim named `race` (to card 7 of
    n1) between our Reserve and our PreBind, once."""

    def __init__(self, race: str) -> None:
        super().__init__()
        self.race = race

    async def allocate(
        self, claim: ResourceClaim, allocation: AllocationResult, pod: PodInfo
    ) -> tuple[ResourceClaim | None, Status]:
        if claim.name == self.race:
            self.race = ""
            theirs = resource_claim_from_k8s(
                gpu_claim(
                    claim.name,
                    uid=claim.uid,
                    rv="50",
                    allocation=gpu_allocation("n1", 7),
                    reserved_for=[{"resource": "pods", "name": "theirs", "uid": "uid-theirs"}],
                )
            )
            self.put_claim(theirs)
        return await super().allocate(claim, allocation, pod)


def test_pre_bind_conflict_fails_the_binding_and_the_pod_retries_without_double_booking() -> None:
    dra = RacingDra("contested")
    sim, _ = world(dra_node("n1"), dra=dra)
    claim(dra, gpu_claim("contested"))
    d = sim.submit(claimed("p", "contested"))
    # The binding cycle failed on the conflict (bindClaim's check on the fresh copy).
    assert d.result is Result.ERROR
    assert d.message == "claim ns/contested got allocated elsewhere in the meantime"
    assert "uid-p" not in sim.cluster.bound
    assert sim.cache.get("uid-p") is None  # the assumed pod was forgotten
    assert not dra.inflight  # the in-flight allocation was given up
    got = dra.claim("ns", "contested")
    assert got is not None and [r.device for r in got.allocation.results] == ["gpu-7"]  # type: ignore[union-attr]
    assert [r.name for r in got.reserved_for] == ["theirs"]
    settle(sim)
    # Only the winner's card is held: ours was released.
    assert free(sim, "n1") == [1000] * 7 + [0]
    # Retried after backoff: the claim is allocated now, so the pod joins it on n1.
    bound: list[Decision] = []
    sim.on_bound(bound.append)
    sim.events.dra_changed(DraChange(CLAIMS, "ns", "contested", status_changed=True))
    sim.advance(sim.clock() + 60)
    assert [(x.pod.name, x.node) for x in bound] == [("p", "n1")]
    assert reserved(dra, "contested") == ["theirs", "p"]
    settle(sim)
    assert free(sim, "n1") == [1000] * 7 + [0]


class ClashingDra(MemoryDra):
    """A MemoryDra where, once, another scheduler gives the device we are about to write
    (our Reserve's choice) to a different claim `theirs` just before our write lands: the
    API server checks no device across claims."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = True

    async def allocate(
        self, claim: ResourceClaim, allocation: AllocationResult, pod: PodInfo
    ) -> tuple[ResourceClaim | None, Status]:
        if self.armed:
            self.armed = False
            device = allocation.results[0].device
            index = int(device.rsplit("-", 1)[1])
            self.put_claim(
                resource_claim_from_k8s(
                    gpu_claim(
                        "theirs",
                        rv="60",
                        allocation=gpu_allocation("n1", index),
                        reserved_for=[{"resource": "pods", "name": "other", "uid": "uid-o"}],
                    )
                )
            )
        return await super().allocate(claim, allocation, pod)


def test_a_device_another_scheduler_gave_to_another_claim_meanwhile_is_given_up() -> None:
    """PreBind checks its written allocations against every other claim once the watch
    shows them: the clash is undone (our allocation cleared, the binding failed), and the
    retry takes another card, so no device is held by two claims."""
    dra = ClashingDra()
    sim, _ = world(dra_node("n1"), dra=dra)
    claim(dra, gpu_claim("mine"))
    d = sim.submit(claimed("p", "mine"))
    assert d.result is Result.ERROR
    assert "was also allocated to claim ns/theirs by another scheduler meanwhile" in d.message
    assert "uid-p" not in sim.cluster.bound
    got = dra.claim("ns", "mine")
    assert got is not None and got.allocation is None and not got.reserved_for
    theirs = dra.claim("ns", "theirs")
    assert theirs is not None and theirs.allocation is not None
    taken = theirs.allocation.results[0].device
    bound: list[Decision] = []
    sim.on_bound(bound.append)
    sim.events.dra_changed(DraChange(CLAIMS, "ns", "mine", deallocated=True))
    sim.advance(sim.clock() + 60)
    assert [(x.pod.name, x.node) for x in bound] == [("p", "n1")]
    got = dra.claim("ns", "mine")
    assert got is not None and got.allocation is not None
    assert got.allocation.results[0].device != taken
    settle(sim)
    assert sorted(free(sim, "n1")).count(0) == 2  # theirs and ours, one card each


class FailReserve:
    """A Reserve plugin after DynamicResources that always refuses."""

    name: ClassVar[str] = "FailReserve"

    def __init__(self, args: Any, handle: Any) -> None:
        self.unreserved = 0

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        return Status(Code.UNSCHEDULABLE, ("no room in the reservation book",))

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        self.unreserved += 1


def _with_fail_reserve(reg: Any, profile: Any) -> Any:
    reg.register(FailReserve)
    plugins = dict(profile.plugins)
    plugins[Point.RESERVE] = (*plugins[Point.RESERVE], PluginRef("FailReserve"))
    return dataclasses.replace(profile, plugins=plugins)


def test_unreserve_gives_the_allocation_up_when_a_later_reserve_fails() -> None:
    sim, dra = world(dra_node("n1"), profile_edit=_with_fail_reserve)
    claim(dra, gpu_claim("one"))
    d = sim.submit(claimed("p", "one"))
    assert d.result is Result.UNSCHEDULABLE
    assert "no room in the reservation book" in d.message
    assert not dra.inflight and dra.writes == []
    got = dra.claim("ns", "one")
    assert got is not None and got.allocation is None
    settle(sim)
    assert free(sim, "n1") == [1000] * 8
    assert sim.cache.get("uid-p") is None
