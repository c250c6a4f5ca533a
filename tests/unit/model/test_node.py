"""Node parsing: inventory annotation, GFD fallback, and bad data kept with warnings."""

from __future__ import annotations

from typing import Any

import orjson

from gpusched.model import keys
from gpusched.model.node import MAX_PARSED_CARDS, TopologyKeys, node_from_k8s


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
