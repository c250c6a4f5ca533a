"""core/dra_ledger.py: allocated claims charge exactly the cards their devices are, in the
simulator's cache (the ledger the scheduling loop syncs before every attempt)."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpusched.config import builtin_profile
from gpusched.core.schedule_one import Result
from gpusched.framework.dra import MemoryDra
from gpusched.model.dra import (
    ResourceClaim,
    device_class_from_k8s,
    resource_claim_from_k8s,
    resource_slice_from_k8s,
)
from gpusched.model.node import Card, NodeModel
from gpusched.model.pod import pod_from_k8s
from gpusched.plugins import default_registry
from gpusched.sim.engine import Simulation
from tests.dra_builders import gpu_allocation, gpu_claim, gpu_class, gpu_slice

GiB = 1024**3


def node(name: str, **kw: Any) -> NodeModel:
    return NodeModel(name=name, cpu_milli=64_000, memory_bytes=512 * GiB, pods=110, **kw)


def shared(name: str, gpus: int = 2) -> dict[str, Any]:
    raw = gpu_slice(name, gpus)
    for d in raw["spec"]["devices"]:
        d["allowMultipleAllocations"] = True
    return raw


def sim_with(*nodes: NodeModel, slices: list[dict[str, Any]]) -> tuple[Simulation, MemoryDra]:
    dra = MemoryDra()
    dra.put_class(device_class_from_k8s(gpu_class()))
    for raw in slices:
        dra.put_slice(resource_slice_from_k8s(raw))
    reg = default_registry()
    return Simulation(nodes, builtin_profile("ai-scheduler", reg), reg, dra=dra), dra


def put(dra: MemoryDra, raw: dict[str, Any]) -> ResourceClaim:
    c = resource_claim_from_k8s(raw)
    assert not c.errors, c.errors
    dra.put_claim(c)
    return c


def share_allocation(node: str, *shares: tuple[int, str], admin: bool = False) -> dict[str, Any]:
    alloc = gpu_allocation(node)
    alloc["devices"]["results"] = [
        {
            "request": "gpu",
            "driver": "gpu.nvidia.com",
            "pool": node,
            "device": f"gpu-{i}",
            "consumedCapacity": {"memory": memory},
            "shareID": f"share-{n}",
            **({"adminAccess": True} if admin else {}),
        }
        for n, (i, memory) in enumerate(shares)
    ]
    return alloc


def cards(sim: Simulation, name: str) -> tuple[list[int], list[int]]:
    """Free milli and free MiB per card, after the ledger synced what the port holds."""
    sim.schedule_one.dra_ledger.sync()
    snap = sim.snapshot
    row = snap.row_of(name)
    n = int(snap.node_card_count[row])
    return (
        [int(x) for x in snap.card_free_milli[row, :n]],
        [int(x) for x in snap.card_free_mem[row, :n]],
    )


FULL = 80 * 1024  # MiB of one A100-80GB


def test_a_device_allocated_outright_holds_its_whole_card() -> None:
    sim, dra = sim_with(node("n1"), slices=[gpu_slice("n1", 4)])
    put(dra, gpu_claim("c", allocation=gpu_allocation("n1", 1, 3)))
    assert cards(sim, "n1") == ([1000, 0, 1000, 0], [FULL, 0, FULL, 0])
    assert set(sim.cache.device_charges()) == {"uid-claim-c@n1"}


def test_memory_shares_charge_their_part_and_add_up_on_one_card() -> None:
    sim, dra = sim_with(node("n1"), slices=[shared("n1")])
    put(dra, gpu_claim("a", allocation=share_allocation("n1", (0, "20Gi"))))
    assert cards(sim, "n1") == ([750, 1000], [FULL - 20 * 1024, FULL])
    put(dra, gpu_claim("b", allocation=share_allocation("n1", (0, "40Gi"))))
    assert cards(sim, "n1") == ([250, 1000], [FULL - 60 * 1024, FULL])


def test_admin_access_holds_nothing() -> None:
    sim, dra = sim_with(node("n1"), slices=[gpu_slice("n1", 2)])
    admin = gpu_allocation("n1", 0)
    admin["devices"]["results"][0]["adminAccess"] = True
    put(dra, gpu_claim("watcher", allocation=admin))
    assert cards(sim, "n1") == ([1000, 1000], [FULL, FULL])
    assert dict(sim.cache.device_charges()) == {}


def test_a_deallocated_or_deleted_claim_releases_its_cards() -> None:
    sim, dra = sim_with(node("n1"), slices=[gpu_slice("n1", 2)])
    put(dra, gpu_claim("a", allocation=gpu_allocation("n1", 0)))
    b = put(dra, gpu_claim("b", allocation=gpu_allocation("n1", 1)))
    assert cards(sim, "n1")[0] == [0, 0]
    put(dra, gpu_claim("a", rv="2"))  # status.allocation cleared
    assert cards(sim, "n1")[0] == [1000, 0]
    dra.remove_claim(b)
    assert cards(sim, "n1")[0] == [1000, 1000]
    assert dict(sim.cache.device_charges()) == {}


def test_an_in_flight_allocation_holds_its_card_until_forgotten() -> None:
    sim, dra = sim_with(node("n1"), slices=[gpu_slice("n1", 2)])
    c = put(dra, gpu_claim("c"))
    decided = resource_claim_from_k8s(gpu_claim("c", allocation=gpu_allocation("n1", 1)))
    dra.assume(dataclasses.replace(c, allocation=decided.allocation))
    assert cards(sim, "n1")[0] == [1000, 0]
    dra.forget(c.uid)
    assert cards(sim, "n1")[0] == [1000, 1000]


def test_cards_a_node_owns_otherwise_are_not_charged_from_claims() -> None:
    # A device-plugin node that also has a slice: its cards are the device plugin's.
    plain = node(
        "n1",
        cards=tuple(Card(i, "A100", FULL) for i in range(2)),
        gpu_source="gfd",
        allocatable_gpus=2,
    )
    sim, dra = sim_with(plain, slices=[gpu_slice("n1", 2)])
    put(dra, gpu_claim("c", allocation=gpu_allocation("n1", 0)))
    assert cards(sim, "n1")[0] == [1000, 1000]
    assert dict(sim.cache.device_charges()) == {}


def test_a_node_that_arrives_after_its_claims_is_charged_when_it_comes() -> None:
    sim, dra = sim_with(node("n1"), slices=[gpu_slice("n1", 2), gpu_slice("n2", 2)])
    put(dra, gpu_claim("c", allocation=gpu_allocation("n2", 1)))
    cards(sim, "n1")
    assert dict(sim.cache.device_charges()) == {}  # n2 is not a node yet
    sim.events.node_changed(node("n2"))
    assert cards(sim, "n2")[0] == [1000, 0]


def test_the_charge_follows_what_the_scheduler_allocates_and_pods_hold_no_cards() -> None:
    sim, dra = sim_with(node("n1"), slices=[gpu_slice("n1", 2)])
    put(dra, gpu_claim("c", count=2))
    pod = pod_from_k8s(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "uid-p"},
            "spec": {
                "schedulerName": "ai-scheduler",
                "containers": [{"name": "c"}],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}],
            },
        }
    )
    assert sim.submit(pod).result is Result.SCHEDULED
    # The claim holds both cards and the pod none: charged twice, they would be -1000.
    assert cards(sim, "n1")[0] == [0, 0]
    dra.pod_gone("uid-p")  # the resourceclaim controller deallocates it
    assert cards(sim, "n1")[0] == [1000, 1000]
