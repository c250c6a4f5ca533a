"""`gpusched.io/gpu-model` in either spelling on both node kinds, the message for a model
no node has, and the reason an NVLink-required pod gets where the layout is unknown.

Nodes come from Kubernetes Node objects through `node_from_k8s` (as the daemon reads them)
and pods from Pod objects through `pod_from_k8s`, so the whole path is exercised: the node
decoding, the snapshot's interned models, the pod's parsed constraint, GPUFit.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gpusched.core.schedule_one import Result
from gpusched.model import keys
from gpusched.model.node import NodeModel, node_from_k8s
from gpusched.model.pod import PodInfo, pod_from_k8s
from gpusched.plugins.gpu_fit.plugin import NO_ISLAND, NVLINK_UNKNOWN
from tests.builders import ai_sim

A100 = "NVIDIA-A100-SXM4-80GB"


def k8s_node(
    name: str, product: str, *, inventory_model: str | None = None, island: int = 8
) -> NodeModel:
    """An 8-card node with GFD's labels; with `inventory_model`, also a gpusched inventory
    naming its cards so (NVLink islands of `island` cards)."""
    annotations: dict[str, str] = {}
    if inventory_model is not None:
        annotations[keys.GPU_INVENTORY] = orjson.dumps(
            [
                {
                    "index": i,
                    "uuid": f"GPU-{name}-{i}",
                    "model": inventory_model,
                    "memoryMiB": 81920,
                    "nvlinkIsland": i // island,
                }
                for i in range(8)
            ]
        ).decode()
    model = node_from_k8s(
        {
            "metadata": {
                "name": name,
                "labels": {
                    keys.GFD_COUNT: "8",
                    keys.GFD_PRODUCT: product,
                    keys.GFD_MEMORY: "81920",
                },
                "annotations": annotations,
            },
            "status": {
                "allocatable": {
                    "cpu": "96",
                    "memory": "1Ti",
                    "pods": "110",
                    keys.GPU_RESOURCE: "8",
                }
            },
        }
    )
    assert model.gpu_source == ("inventory" if inventory_model is not None else "gfd")
    return model


def k8s_pod(name: str, gpus: int, **annotations: str) -> PodInfo:
    obj: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": "ai-scheduler",
            "containers": [{"name": "c", "resources": {"limits": {keys.GPU_RESOURCE: str(gpus)}}}],
        },
    }
    pod = pod_from_k8s(obj)
    assert pod.errors == ()
    return pod


# The agent writes the product name into the inventory; the dev cluster (and inventories
# written from the trace) the short name; GFD labels always the product name.
NODE_KINDS = {
    "inventory-short": {"inventory_model": "A100M80"},
    "inventory-product": {"inventory_model": A100},
    "gfd-only": {},
}


@pytest.mark.parametrize("kind", sorted(NODE_KINDS))
@pytest.mark.parametrize("asked", ["A100M80", A100, "T4|A100M80", f"Tesla-T4|{A100}"])
def test_either_spelling_matches_every_node_kind(kind: str, asked: str) -> None:
    s = ai_sim(
        k8s_node("a100", A100, **NODE_KINDS[kind]),  # type: ignore[arg-type]
        k8s_node("h100", "NVIDIA-H100-80GB-HBM3"),
    )
    d = s.submit(k8s_pod("p", 1, **{keys.GPU_MODEL: asked}))
    assert d.result is Result.SCHEDULED and d.node == "a100"


def test_the_two_spellings_are_one_model_in_the_snapshot() -> None:
    s = ai_sim(
        k8s_node("inv", A100, inventory_model="A100M80"),
        k8s_node("gfd", A100),
        k8s_node("agent", A100, inventory_model=A100),
    )
    snap = s.snapshot
    ids = {int(snap.card_model[snap.row_of(n), 0]) for n in ("inv", "gfd", "agent")}
    assert len(ids) == 1
    assert snap.present_models() == ("A100M80",)
    # Eight 8-card pods asked by either name fill exactly the three nodes, no more.
    placed = [
        s.submit(k8s_pod(f"p{i}", 8, **{keys.GPU_MODEL: ("A100M80", A100)[i % 2]}))
        for i in range(4)
    ]
    assert sorted(d.node for d in placed[:3]) == ["agent", "gfd", "inv"]
    assert placed[3].result is Result.UNSCHEDULABLE


def test_unknown_model_lists_the_models_present_in_both_spellings() -> None:
    s = ai_sim(
        k8s_node("a100", A100, inventory_model="A100M80"),
        k8s_node("h100", "NVIDIA-H100-80GB-HBM3"),
    )
    d = s.submit(k8s_pod("x", 1, **{keys.GPU_MODEL: "H200|Tesla-T4"}))
    assert d.result is Result.UNSCHEDULABLE
    assert d.message == (
        "0/2 nodes are available: no node has a GPU of model H200 or T4 (Tesla-T4);"
        " gpusched.io/gpu-model accepts these models present in the cluster (either name):"
        " A100M80 (NVIDIA-A100-SXM4-80GB), NVIDIA-H100-80GB-HBM3."
    )


def test_unknown_model_lists_only_models_of_nodes_still_there() -> None:
    s = ai_sim(k8s_node("a100", A100), k8s_node("h100", "NVIDIA-H100-80GB-HBM3"))
    s.cache.remove_node("h100")
    d = s.submit(k8s_pod("x", 1, **{keys.GPU_MODEL: "NVIDIA-H100-80GB-HBM3"}))
    assert d.result is Result.UNSCHEDULABLE
    assert d.message.endswith("(either name): A100M80 (NVIDIA-A100-SXM4-80GB).")


def test_nvlink_required_on_a_gfd_only_node_says_the_layout_is_unknown() -> None:
    # Inventory node with two 4-card islands; GFD-only node with the same cards.
    s = ai_sim(k8s_node("inv", A100, inventory_model=A100, island=4), k8s_node("gfd", A100))
    required = {keys.NVLINK: "required"}
    d = s.submit(k8s_pod("big", 6, **required))
    assert d.result is Result.UNSCHEDULABLE
    # One reason per node (the Diagnosis orders equal counts its own way).
    assert d.message in (
        f"0/2 nodes are available: 1 {NO_ISLAND}, 1 {NVLINK_UNKNOWN}.",
        f"0/2 nodes are available: 1 {NVLINK_UNKNOWN}, 1 {NO_ISLAND}.",
    )
    assert "NVLink layout unknown" in NVLINK_UNKNOWN
    # Within one island it fits the inventory node, never the GFD-only one.
    ok = s.submit(k8s_pod("four", 4, **required))
    assert ok.result is Result.SCHEDULED and ok.node == "inv"
    # Without `required` the GFD-only node is as good as any.
    assert s.submit(k8s_pod("free", 6)).result is Result.SCHEDULED
