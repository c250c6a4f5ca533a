"""Node parsing: inventory annotation, GFD fallback, and bad data kept with warnings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given

from gpusched.model import keys
from gpusched.model.node import (
    MAX_CARD_MEMORY_MIB,
    MAX_NODE_PODS,
    MAX_NODE_RESOURCE,
    MAX_PARSED_CARDS,
    TopologyKeys,
    node_from_k8s,
)
from gpusched.model.quantity import QuantityError, to_int, to_milli
from tests.builders import fuzz_settings, raw_nodes


def node(
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    gpus: str | None = "4",
    **spec: Any,
) -> dict[str, Any]:
    alloc = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    if gpus is not None:
        alloc[keys.GPU_RESOURCE] = gpus
    return {
        "metadata": {"name": "n1", "annotations": annotations or {}, "labels": labels or {}},
        "spec": spec,
        "status": {"allocatable": alloc},
    }


def inventory(n: int = 4, **over: Any) -> str:
    return orjson.dumps(
        [
            {
                "index": i,
                "uuid": f"GPU-{i}",
                "model": "A100",
                "memoryMiB": 81920,
                "nvlinkIsland": i // 2,
                "numa": 0,
                "healthy": True,
                **over,
            }
            for i in range(n)
        ]
    ).decode()


def test_inventory_annotation() -> None:
    n = node({keys.GPU_INVENTORY: inventory()}, {keys.RACK_LABEL: "r1", keys.SPINE_LABEL: "s1"})
    m = node_from_k8s(n)
    assert m.gpu_source == "inventory" and m.warnings == ()
    assert [c.nvlink_island for c in m.cards] == [0, 0, 1, 1]
    assert (m.cpu_milli, m.memory_bytes, m.pods, m.rack, m.spine) == (
        32000,
        256 * 2**30,
        110,
        "r1",
        "s1",
    )


def test_inventory_extra_fields_read_and_default() -> None:
    """gpusched agent's fabricClique and powerLimitW; annotations without them stay valid."""
    clique = "5b2d7c1e-9f04-4a8e-b3c6-0d1e2f3a4b5c.32766"
    m = node_from_k8s(node({keys.GPU_INVENTORY: inventory(fabricClique=clique, powerLimitW=700)}))
    assert m.warnings == ()
    assert {(c.fabric_clique, c.power_limit_w) for c in m.cards} == {(clique, 700)}
    assert m.clique == clique  # no GFD label: the cards' shared clique is the node's
    labelled = node({keys.GPU_INVENTORY: inventory(fabricClique=clique)}, {keys.GFD_CLIQUE: "g.1"})
    assert node_from_k8s(labelled).clique == "g.1"  # GFD's label wins
    old = node_from_k8s(node({keys.GPU_INVENTORY: inventory()}))
    assert old.gpu_source == "inventory" and old.warnings == ()
    assert {(c.fabric_clique, c.power_limit_w) for c in old.cards} == {("", 0)}


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("fabricClique", 7, "fabricClique=7 must be a label value"),
        ("fabricClique", "a b", "fabricClique='a b' must be a label value"),
        ("fabricClique", "x" * 64, "at most 63 characters"),
        ("fabricClique", "-abc", "fabricClique='-abc'"),
        ("powerLimitW", -1, "powerLimitW=-1 must be an integer in [0, 100000]"),
        ("powerLimitW", 700.5, "powerLimitW=700.5"),
        ("powerLimitW", True, "powerLimitW=True"),
        ("powerLimitW", 10**6, "powerLimitW=1000000"),
    ],
)
def test_inventory_extra_fields_validated(field: str, value: object, says: str) -> None:
    m = node_from_k8s(node({keys.GPU_INVENTORY: inventory(**{field: value})}, gpus="4"))
    assert m.gpu_source == "gfd"
    assert any(says in w and "falling back" in w for w in m.warnings), m.warnings


def test_cards_beyond_allocatable_keep_their_extra_fields() -> None:
    m = node_from_k8s(node({keys.GPU_INVENTORY: inventory(2, powerLimitW=400)}, gpus="1"))
    assert [(c.healthy, c.power_limit_w) for c in m.cards] == [(True, 400), (False, 400)]


def test_gfd_fallback_identical_cards() -> None:
    m = node_from_k8s(
        node(labels={keys.GFD_PRODUCT: "Tesla-T4", keys.GFD_MEMORY: "15360"}, gpus="2")
    )
    assert m.gpu_source == "gfd"
    assert [(c.model, c.memory_mib, c.nvlink_island) for c in m.cards] == [
        ("Tesla-T4", 15360, -1)
    ] * 2


def test_gfd_without_memory_warns() -> None:
    m = node_from_k8s(node(labels={keys.GFD_PRODUCT: "X"}, gpus="1"))
    assert m.gpu_count == 1 and any("GPU memory unknown" in w for w in m.warnings)


def test_malformed_inventory_falls_back_and_says_why() -> None:
    m = node_from_k8s(node({keys.GPU_INVENTORY: "[{"}, {keys.GFD_MEMORY: "1024"}))
    assert m.gpu_source == "gfd" and m.gpu_count == 4
    assert any("is not valid JSON" in w and "falling back" in w for w in m.warnings)
    m2 = node_from_k8s(node({keys.GPU_INVENTORY: inventory(2, memoryMiB="big")}))
    assert any("memoryMiB='big'" in w for w in m2.warnings)


def test_inventory_beyond_allocatable_marks_cards_unavailable() -> None:
    m = node_from_k8s(node({keys.GPU_INVENTORY: inventory(4)}, gpus="3"))
    assert [c.healthy for c in m.cards] == [True, True, True, False]
    assert any("treated as unavailable" in w for w in m.warnings)


def test_cpu_node_and_custom_topology_keys() -> None:
    m = node_from_k8s(node(labels={"kueue/rack": "r9"}, gpus=None), TopologyKeys(rack="kueue/rack"))
    assert m.gpu_count == 0 and m.gpu_source == "none" and m.rack == "r9"


def test_allocatable_gpus_is_what_the_device_plugin_advertises() -> None:
    """The over-commit detector's card count: allocatable nvidia.com/gpu as advertised,
    whatever the inventory says; -1 without it (GFD labels alone are no device plugin)."""
    assert node_from_k8s(node({keys.GPU_INVENTORY: inventory(4)}, gpus="3")).allocatable_gpus == 3
    assert node_from_k8s(node(gpus="8")).allocatable_gpus == 8
    gfd_only = node_from_k8s(node(labels={keys.GFD_COUNT: "4"}, gpus=None))
    assert gfd_only.gpu_count == 4 and gfd_only.allocatable_gpus == -1
    assert node_from_k8s(node(gpus="lots")).allocatable_gpus == -1


def test_taints_and_unschedulable() -> None:
    m = node_from_k8s(
        node(taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}], unschedulable=True)
    )
    assert m.unschedulable and m.taints[0].effect == "NoSchedule"


def test_bad_allocatable_quantity_is_a_warning() -> None:
    n = node()
    n["status"]["allocatable"]["cpu"] = "many"
    m = node_from_k8s(n)
    assert m.cpu_milli == 0 and any("status.allocatable['cpu']" in w for w in m.warnings)


def test_node_data_cannot_make_the_scheduler_allocate_or_overflow() -> None:
    """A node's labels and annotations are written by agents and admins, not by us: card
    memory past the int32 columns raised OverflowError in the snapshot (half-inserting a
    row), and `nvidia.com/gpu: 1e8` built 10^8 card objects before any limit applied."""
    huge = node_from_k8s(node({keys.GPU_INVENTORY: inventory(2, memoryMiB=2**31)}))
    assert huge.gpu_source != "inventory"
    assert any("memoryMiB=2147483648 must be an integer in [0, 2^31-1]" in w for w in huge.warnings)
    largest = node_from_k8s(node({keys.GPU_INVENTORY: inventory(2, memoryMiB=2**31 - 1)}))
    assert largest.gpu_source == "inventory" and largest.cards[0].memory_mib == 2**31 - 1

    many = node_from_k8s(node({keys.GPU_INVENTORY: inventory(MAX_PARSED_CARDS + 1)}))
    assert any(f"lists {MAX_PARSED_CARDS + 1} cards" in w for w in many.warnings)
    flood = node_from_k8s(node(gpus="100000000"))
    assert flood.gpu_count == 0
    assert any("100000000 GPUs advertised" in w for w in flood.warnings)
    big_label = node_from_k8s(node(labels={keys.GFD_MEMORY: str(2**40)}, gpus="2"))
    assert [c.memory_mib for c in big_label.cards] == [0, 0]
    assert any("out of range" in w for w in big_label.warnings)


# --- hostile and malformed node data: kept with a fallback and a warning, never raised ----


def _quantity_or_none(raw: object, parse: Callable[[object], int], hi: int) -> int | None:
    try:
        value = parse(raw)
    except QuantityError:
        return None
    return value if 0 <= value <= hi else None


@given(raw=raw_nodes())
@fuzz_settings(250)
def test_any_node_the_watch_could_deliver_parses_with_bounded_fields_or_warnings(
    raw: dict[str, Any],
) -> None:
    m = node_from_k8s(raw)  # never raises
    assert 0 <= m.cpu_milli <= MAX_NODE_RESOURCE and 0 <= m.memory_bytes <= MAX_NODE_RESOURCE
    assert 0 <= m.pods <= MAX_NODE_PODS
    assert [c.index for c in m.cards] == list(
        range(m.gpu_count)
    ) and m.gpu_count <= MAX_PARSED_CARDS
    assert all(
        0 <= c.memory_mib <= MAX_CARD_MEMORY_MIB and -1 <= c.nvlink_island <= 126 for c in m.cards
    )
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in m.labels.items())
    assert all(isinstance(w, str) and w for w in m.warnings)
    # Each allocatable value it could not use is named in a warning.
    status = raw["status"]
    alloc = (
        status.get("allocatable") or status.get("capacity") if isinstance(status, dict) else None
    )
    if isinstance(alloc, dict):
        for name, parse, hi, got in (
            ("cpu", to_milli, MAX_NODE_RESOURCE, m.cpu_milli),
            ("memory", to_int, MAX_NODE_RESOURCE, m.memory_bytes),
            ("pods", to_int, MAX_NODE_PODS, m.pods),
        ):
            if name in alloc and alloc[name] is not None:
                value = _quantity_or_none(alloc[name], parse, hi)
                if value is None:
                    assert any(f"status.allocatable[{name!r}]" in w for w in m.warnings)
                else:
                    assert got == value
    # An inventory annotation is either used, card for card, or the warning says why not.
    ann = raw["metadata"]["annotations"]
    if isinstance(ann, dict) and keys.GPU_INVENTORY in ann:
        if m.gpu_source == "inventory":
            assert m.gpu_count == len(orjson.loads(ann[keys.GPU_INVENTORY]))
        else:
            assert any(w.startswith(f"annotation {keys.GPU_INVENTORY}") for w in m.warnings)


@pytest.mark.parametrize(
    ("label", "said"),
    [
        ("\u0663", "label nvidia.com/gpu.count='\u0663' is not an integer"),  # was 3 cards
        ("2_0", "label nvidia.com/gpu.count='2_0' is not an integer"),  # was 20 cards
    ],
)
def test_gfd_count_label_is_ascii_digits_only(label: str, said: str) -> None:
    m = node_from_k8s(node(labels={keys.GFD_COUNT: label}, gpus=None))
    assert m.gpu_count == 0 and said in m.warnings


def test_gfd_memory_label_is_ascii_digits_only() -> None:
    m = node_from_k8s(node(labels={keys.GFD_MEMORY: "\u0663"}, gpus="2"))  # was 3 MiB
    assert [c.memory_mib for c in m.cards] == [0, 0]
    assert any("nvidia.com/gpu.memory='\u0663' is not an integer MiB" in w for w in m.warnings)


@pytest.mark.parametrize(
    ("name", "raw", "default"),
    [
        ("cpu", "1e30", 0),  # overflowed the int64 column in the cache (OverflowError)
        ("memory", "1e30", 0),
        ("pods", "1e12", 110),  # past the int32 column
        ("cpu", "-4", 0),  # a negative capacity was taken as is
    ],
)
def test_allocatable_out_of_the_columns_range_is_a_warning(
    name: str, raw: str, default: int
) -> None:
    n = node()
    n["status"]["allocatable"][name] = raw
    m = node_from_k8s(n)
    assert (m.cpu_milli, m.memory_bytes, m.pods)[["cpu", "memory", "pods"].index(name)] == default
    assert any(f"status.allocatable[{name!r}]" in w and "out of range" in w for w in m.warnings)


@pytest.mark.parametrize(
    ("where", "value", "said"),
    [
        ("labels", [1], "metadata.labels is list, not an object"),  # raised TypeError
        ("labels", "ab", "metadata.labels is str, not an object"),  # raised ValueError
        (
            "labels",
            {keys.GFD_COUNT: [1]},
            "metadata.labels['nvidia.com/gpu.count']=[1] is not a string",
        ),
        (  # was taken as no inventory at all, silently
            "annotations",
            {keys.GPU_INVENTORY: None},
            f"annotation {keys.GPU_INVENTORY} must be a string",
        ),
        (
            "annotations",
            {keys.GPU_INVENTORY: 5},
            f"annotation {keys.GPU_INVENTORY} must be a string",
        ),
        ("taints", 5, "spec.taints is int, not a list"),  # raised TypeError
        ("allocatable", [1], "status.allocatable is list, not an object"),  # raised AttributeError
    ],
)
def test_wrong_json_types_are_warnings_not_exceptions(where: str, value: Any, said: str) -> None:
    n = node()
    if where == "taints":
        n["spec"]["taints"] = value
    elif where == "allocatable":
        n["status"]["allocatable"] = value
    else:
        n["metadata"][where] = value
    m = node_from_k8s(n)
    assert any(said in w for w in m.warnings)


def test_a_node_that_is_not_an_object_is_a_warning() -> None:
    m = node_from_k8s([])  # raised AttributeError: 'list' object has no attribute 'get'
    assert m.name == "" and m.warnings == ("the node is list, not an object",)


def test_other_allocatable_resources_in_base_units() -> None:
    raw = node()
    raw["status"]["allocatable"].update(
        {"rdma/hca": "2", "ephemeral-storage": "100Gi", "hugepages-1Gi": "2Gi", "bad.io/x": "1q"}
    )
    n = node_from_k8s(raw)
    assert dict(n.other) == {
        "bad.io/x": 0,
        "ephemeral-storage": 100 * 2**30,
        "hugepages-1Gi": 2 * 2**30,
        "rdma/hca": 2,
    }
    assert any("bad.io/x" in w for w in n.warnings)
    assert node_from_k8s(node()).other == ()  # cpu, memory, pods and the GPU count are fields


def test_fabric_clique_label() -> None:
    clique = "4a1f0c3e-9d2b-4c5a-8e7f-1b2c3d4e5f60.7"
    m = node_from_k8s(node(labels={keys.GFD_CLIQUE: clique}))
    assert m.clique == clique  # the whole value: a CliqueId is unique only in its cluster
    assert node_from_k8s(node()).clique == ""
    custom = TopologyKeys(clique="example.com/nvl")
    assert node_from_k8s(node(labels={"example.com/nvl": "d1"}), custom).clique == "d1"
