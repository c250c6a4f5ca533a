"""dra/cards.py: a node's cards from its ResourceSlices, a pod's card-shaped claims as a GPU
request, and the card shares allocated devices hold."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any

from gpusched.dra.cards import (
    CardMap,
    card_demand,
    card_map,
    charge_of,
    product_model,
    with_dra_cards,
)
from gpusched.model.dra import ResourceClaim, resource_claim_from_k8s, resource_slice_from_k8s
from gpusched.model.node import Card, NodeModel
from tests.dra_builders import GPU_CLASS, gpu_claim, gpu_device, gpu_slice

MIB = Decimal(1024 * 1024)
GiB = 1024 * MIB
CLASSES = frozenset({GPU_CLASS})


def slice_of(raw: dict[str, Any]) -> Any:
    rs = resource_slice_from_k8s(raw)
    assert not rs.errors, rs.errors
    return rs


def claim_of(raw: dict[str, Any]) -> ResourceClaim:
    c = resource_claim_from_k8s(raw)
    assert not c.errors, c.errors
    return c


# -- card_map ----------------------------------------------------------------------------------


def test_cards_are_the_nodes_gpus_in_index_order_with_the_drivers_attributes() -> None:
    raw = gpu_slice("n1", 3, product="NVIDIA H100 80GB HBM3")
    raw["spec"]["devices"].reverse()  # the driver's order is not the cards' order
    cards = card_map("n1", [slice_of(raw)])
    assert [d[2] for d in cards.devices] == ["gpu-0", "gpu-1", "gpu-2"]
    assert all(d[:2] == ("gpu.nvidia.com", "n1") for d in cards.devices)
    assert [c.index for c in cards.cards] == [0, 1, 2]
    assert {c.model for c in cards.cards} == {"NVIDIA-H100-80GB-HBM3"}
    assert {c.memory_mib for c in cards.cards} == {80 * 1024}
    assert cards.cards[1].uuid.endswith("0001")
    assert cards.memory == (80 * GiB,) * 3 and cards.shareable == (False,) * 3
    assert cards.card_of(("gpu.nvidia.com", "n1", "gpu-2")) == 2
    assert cards.card_of(("gpu.nvidia.com", "n1", "gpu-9")) == -1


def test_without_an_index_the_number_in_the_name_orders_gpu_10_after_gpu_9() -> None:
    raw = gpu_slice("n1", 11)
    for d in raw["spec"]["devices"]:
        del d["attributes"]["index"], d["attributes"]["minor"]
    cards = card_map("n1", [slice_of(raw)])
    assert [d[2] for d in cards.devices][-3:] == ["gpu-8", "gpu-9", "gpu-10"]


def test_only_full_gpus_local_to_the_node_of_the_newest_generation_are_cards() -> None:
    mine = gpu_slice("n1", 2, generation=2)
    mig = gpu_device(7)
    mig["name"] = "gpu-0-mig-1g10gb-0"
    mig["attributes"]["type"] = {"string": "mig"}
    mine["spec"]["devices"].append(mig)
    old = gpu_slice("n1", 4, uid="old", generation=1)
    other_node = gpu_slice("n2", 4)
    other_driver = gpu_slice("n1", 2, uid="nic")
    other_driver["spec"]["driver"] = "nic.example.com"
    other_driver["spec"]["pool"]["name"] = "nics"
    slices = [slice_of(r) for r in (mine, old, other_node, other_driver)]
    cards = card_map("n1", slices)
    assert [d[2] for d in cards.devices] == ["gpu-0", "gpu-1"]
    # The snapshot's width caps the cards; the rest stay the allocator's alone.
    assert len(card_map("n1", slices, max_cards=1).cards) == 1
    assert card_map("n3", slices) == CardMap()


def test_a_tainted_gpu_is_an_unhealthy_card_and_a_shareable_one_is_marked() -> None:
    raw = gpu_slice("n1", 2)
    raw["spec"]["devices"][0]["taints"] = [{"key": "gpu.nvidia.com/xid", "effect": "NoSchedule"}]
    raw["spec"]["devices"][1]["allowMultipleAllocations"] = True
    cards = card_map("n1", [slice_of(raw)])
    assert [c.healthy for c in cards.cards] == [False, True]
    assert cards.shareable == (False, True)


def test_product_names_take_gpu_feature_discoverys_label_form() -> None:
    assert product_model("NVIDIA A100-SXM4-80GB") == "NVIDIA-A100-SXM4-80GB"
    assert product_model("  NVIDIA  H100 80GB HBM3 ") == "NVIDIA-H100-80GB-HBM3"


# -- with_dra_cards --------------------------------------------------------------------------


def bare(name: str = "n1", **kw: Any) -> NodeModel:
    return NodeModel(name=name, cpu_milli=8000, memory_bytes=2**34, pods=110, **kw)


def test_a_node_takes_its_cards_from_slices_only_when_it_has_none_of_its_own() -> None:
    slices = [slice_of(gpu_slice("n1", 2))]
    got = with_dra_cards(bare(), slices, 8)
    assert got.gpu_source == "dra" and len(got.cards) == 2
    assert with_dra_cards(got, slices, 8) == got  # idempotent
    plugin = bare(cards=(Card(0, "A100", 81920),), gpu_source="inventory", allocatable_gpus=1)
    assert with_dra_cards(plugin, slices, 8) is plugin  # one owner per card
    # GPU Feature Discovery's labels without the device plugin's allocatable: the slices
    # own the cards; with the device plugin advertising nvidia.com/gpu, they do not.
    labelled = bare(cards=(Card(0, "A100", 81920),), gpu_source="gfd", allocatable_gpus=-1)
    took = with_dra_cards(labelled, slices, 8)
    assert (
        took.gpu_source == "dra" and [c.model for c in took.cards] == ["NVIDIA-A100-SXM4-80GB"] * 2
    )
    assert with_dra_cards(labelled, [], 8) is labelled  # no slices: the labels stand
    advertised = dataclasses.replace(labelled, allocatable_gpus=1)
    assert with_dra_cards(advertised, slices, 8) is advertised
    # Its slices went away: a DRA node becomes a CPU node again.
    gone = with_dra_cards(got, [], 8)
    assert gone.gpu_source == "none" and gone.cards == ()
    assert with_dra_cards(bare(), [], 8) == bare()


# -- card_demand -----------------------------------------------------------------------------


def share(name: str, memory: str, count: int = 1) -> dict[str, Any]:
    raw = gpu_claim(name, count=count)
    raw["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"memory": memory}}
    return raw


def test_whole_cards_add_up_across_claims_and_a_share_is_memory_in_mib() -> None:
    two = claim_of(gpu_claim("a", count=2))
    one = claim_of(gpu_claim("b"))
    got = card_demand([two, one], CLASSES)
    assert (got.cards, got.mem_mib) == (3, 0)
    half = card_demand([claim_of(share("h", "40Gi"))], CLASSES)
    assert (half.cards, half.mem_mib) == (0, 40 * 1024)
    # Rounded up to whole MiB.
    odd = card_demand([claim_of(share("o", "1000000"))], CLASSES)
    assert odd.mem_mib == 1
    assert card_demand([], CLASSES).empty


def test_shapes_the_card_model_cannot_hold_are_left_to_the_allocator() -> None:
    mixed = [claim_of(gpu_claim("a")), claim_of(share("h", "40Gi"))]
    assert card_demand(mixed, CLASSES).empty
    assert card_demand([claim_of(share("h", "10Gi", count=2))], CLASSES).empty
    assert card_demand([claim_of(share("h", "10Gi")), claim_of(share("i", "10Gi"))], CLASSES).empty
    # Another class (MIG), All, admin access, firstAvailable: not card-shaped.
    mig = gpu_claim("m")
    mig["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "mig.nvidia.com"
    every = gpu_claim("e")
    every["spec"]["devices"]["requests"][0]["exactly"] = {
        "deviceClassName": GPU_CLASS,
        "allocationMode": "All",
    }
    admin = gpu_claim("x")
    admin["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    either = gpu_claim("f")
    either["spec"]["devices"]["requests"] = [
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "big", "deviceClassName": GPU_CLASS, "count": 2},
                {"name": "small", "deviceClassName": GPU_CLASS},
            ],
        }
    ]
    for raw in (mig, every, admin, either):
        assert card_demand([claim_of(raw)], CLASSES).empty, raw["metadata"]["name"]
    # The same MIG claim counts when its class is configured as a card class.
    assert card_demand([claim_of(mig)], {"mig.nvidia.com"}).cards == 1


# -- charge_of -------------------------------------------------------------------------------


def shared_cards() -> CardMap:
    raw = gpu_slice("n1", 2)
    for d in raw["spec"]["devices"]:
        d["allowMultipleAllocations"] = True
    return card_map("n1", [slice_of(raw)])


def dev(i: int) -> tuple[str, str, str]:
    return ("gpu.nvidia.com", "n1", f"gpu-{i}")


def test_a_device_allocated_outright_holds_its_whole_card() -> None:
    cards = card_map("n1", [slice_of(gpu_slice("n1", 4))])
    got = charge_of([(dev(2), {}), (dev(0), {})], cards)
    assert (got.cards, got.milli, got.mem_mib) == ((0, 2), (1000, 1000), (81920, 81920))
    # Consumed memory on a device that cannot be shared still holds all of it.
    half = {"gpu.nvidia.com/memory": 40 * GiB}
    assert charge_of([(dev(1), half)], cards).milli == (1000,)


def test_shares_hold_their_memorys_part_of_the_card_and_add_up() -> None:
    cards = shared_cards()
    quarter = {"gpu.nvidia.com/memory": 20 * GiB}
    got = charge_of([(dev(1), quarter)], cards)
    assert (got.cards, got.milli, got.mem_mib) == ((1,), (250,), (20 * 1024,))
    both = charge_of([(dev(1), quarter), (dev(1), quarter)], cards)
    assert (both.milli, both.mem_mib) == ((500,), (40 * 1024,))
    # Rounded up: a sliver still holds something.
    sliver = charge_of([(dev(0), {"gpu.nvidia.com/memory": Decimal(1)})], cards)
    assert sliver.mem_mib == (1,) and sliver.milli == (1,)
    # More than the card has is capped at the card.
    over = charge_of([(dev(0), {"gpu.nvidia.com/memory": 100 * GiB})], cards)
    assert (over.milli, over.mem_mib) == ((1000,), (80 * 1024,))


def test_devices_that_are_not_cards_hold_nothing() -> None:
    cards = shared_cards()
    got = charge_of([(("nic.example.com", "nics", "nic-0"), {}), (dev(5), {})], cards)
    assert got.cards == () and got.milli == ()
