"""Nodes and pods the daemon parses into exactly the FGD simulator's nodes and pods.

The FGD protocol's simulator (:func:`gpusched.sim.trace_cluster.cluster_nodes`) and the local
control plane (:func:`gpusched.devcluster.nodes.node_object`) build the openb nodes
differently: the simulator gives every node 1001 pod slots (the FGD artifact's node
template), card memory from ``trace_cluster.CARD_MEMORY_MIB``, no racks and no NVLink or
NUMA data; the devcluster gives 110 pods (the kubelet default), its own per-model memory
(A10 23028, G2 32768, G3 49152 MiB), racks of 8 nodes in file order and one NVLink island
per 8-card board. Any of these can change a placement (a pods cap, a shared pod's
proportional memory, NetworkLocality's rack terms), so the live-parity benchmark
(``bench/fgd_cluster.py``) loads the nodes built here, and a unit test asserts that
:func:`gpusched.model.node.node_from_k8s` of each equals the simulator's NodeModel field
by field (:func:`node_differences`). :func:`trace_pod_object` does the same for a pod of the
arrival sequence: ``pod_from_k8s`` of it has the simulator's ``PodRequest``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from gpusched.devcluster.nodes import NodeSpec, node_object
from gpusched.model import keys
from gpusched.model.node import NodeModel
from gpusched.model.pod import PodInfo
from gpusched.sim.trace_cluster import (
    CARD_MEMORY_MIB,
    DEFAULT_CARD_MEMORY_MIB,
    MODEL_LABEL,
    POD_SLOTS,
)

__all__ = [
    "fleet_differences",
    "node_differences",
    "trace_node_object",
    "trace_node_objects",
    "trace_pod_object",
]

# The pod's name in the trace (or the clone's, e.g. ``openb-pod-0017-tuned-3``) and its
# arrival index, so a read-back placement can be matched to the simulator's.
TRACE_NAME_ANNOTATION = "bench.gpusched.io/trace-name"
ARRIVAL_LABEL = "bench.gpusched.io/arrival"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"  # never pulled: KWOK runs no containers


def trace_node_object(spec: NodeSpec) -> dict[str, Any]:
    """``node_object(spec)`` changed where it differs from the simulator's node of the same
    trace row (see the module docstring); everything else (GFD labels, KWOK annotation,
    capacity) is left as the devcluster writes it, so the daemon parses a realistic node."""
    obj = node_object(spec)
    meta = obj["metadata"]
    labels: dict[str, str] = meta["labels"]
    # The FGD protocol has no topology: without rack labels NetworkLocality sees what it
    # sees in the simulator (nothing).
    labels.pop(keys.RACK_LABEL, None)
    labels.pop(keys.SPINE_LABEL, None)
    if spec.model:
        labels[MODEL_LABEL] = spec.model
    for res in (obj["status"]["capacity"], obj["status"]["allocatable"]):
        res["pods"] = str(POD_SLOTS)
    if spec.gpus > 0:
        memory = CARD_MEMORY_MIB.get(spec.model, DEFAULT_CARD_MEMORY_MIB)
        inventory = json.loads(meta["annotations"][keys.GPU_INVENTORY])
        for card in inventory:
            card["model"] = spec.model
            card["memoryMiB"] = memory
            # The simulator's cards carry no NVLink/NUMA data (-1); choose_cards groups cards
            # by island, so the same cards must be "unknown" here too.
            card["nvlinkIsland"] = -1
            card["numa"] = -1
        meta["annotations"][keys.GPU_INVENTORY] = json.dumps(inventory, separators=(",", ":"))
        labels[keys.GFD_MEMORY] = str(memory)
    return obj


def trace_node_objects(specs: Iterable[NodeSpec]) -> list[dict[str, Any]]:
    return [trace_node_object(s) for s in specs]


# Fields that describe the node to the scheduler. `labels` is compared only on the keys the
# simulator sets (the KWOK node also carries hostname/GFD labels no policy of the protocol
# reads); `warnings` must be empty on both sides.
_FIELDS = (
    "name",
    "cpu_milli",
    "memory_bytes",
    "pods",
    "taints",
    "unschedulable",
    "rack",
    "spine",
    "gpu_source",
    "warnings",
)
_CARD_FIELDS = ("index", "model", "memory_mib", "nvlink_island", "numa", "healthy")


def node_differences(sim: NodeModel, live: NodeModel) -> list[str]:
    """Every field where the daemon's node (`live`, parsed from the API object) differs
    from the simulator's; empty when they place pods the same. Card UUIDs are ignored (the
    simulator's cards have none; nothing schedules by UUID)."""
    out: list[str] = []
    for name in _FIELDS:
        a, b = getattr(sim, name), getattr(live, name)
        if a != b:
            out.append(f"{sim.name}: {name} sim={a!r} live={b!r}")
    if len(sim.cards) != len(live.cards):
        out.append(f"{sim.name}: cards sim={len(sim.cards)} live={len(live.cards)}")
    for cs, cl in zip(sim.cards, live.cards, strict=False):
        for name in _CARD_FIELDS:
            a, b = getattr(cs, name), getattr(cl, name)
            if a != b:
                out.append(f"{sim.name}: card {cs.index} {name} sim={a!r} live={b!r}")
    for key, value in sim.labels.items():
        if live.labels.get(key) != value:
            out.append(f"{sim.name}: label {key} sim={value!r} live={live.labels.get(key)!r}")
    return out


def fleet_differences(sim: Sequence[NodeModel], live: Sequence[NodeModel]) -> list[str]:
    """`node_differences` over two fleets matched by name, plus nodes only one side has."""
    by_name = {n.name: n for n in live}
    out: list[str] = []
    for node in sim:
        other = by_name.pop(node.name, None)
        if other is None:
            out.append(f"{node.name}: missing from the live cluster")
        else:
            out.extend(node_differences(node, other))
    out.extend(f"{name}: not a simulator node" for name in sorted(by_name))
    return out


def trace_pod_object(pod: PodInfo, name: str, arrival: int) -> dict[str, Any]:
    """A Pod for the API whose parsed request equals `pod.request` (the simulator's pod of
    :func:`gpusched.sim.trace_cluster.pod_info`): CPU and memory as container requests,
    whole cards as the ``nvidia.com/gpu`` limit, a share of one card as gpusched.io/gpu-milli,
    acceptable models as gpusched.io/gpu-model. `name` is the API name (the trace's names
    need not be DNS labels)."""
    req = pod.request
    requests: dict[str, str] = {"cpu": f"{req.cpu_milli}m", "memory": str(req.memory_bytes)}
    resources: dict[str, Any] = {"requests": requests}
    annotations = {TRACE_NAME_ANNOTATION: pod.name}
    if req.gpu_cards:
        resources["limits"] = {keys.GPU_RESOURCE: str(req.gpu_cards)}
    elif req.gpu_milli:
        annotations[keys.GPU_MILLI] = str(req.gpu_milli)
    if req.gpu_models:
        annotations[keys.GPU_MODEL] = "|".join(req.gpu_models)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {ARRIVAL_LABEL: str(arrival)},
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": pod.scheduler_name,
            "containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": resources}],
            "terminationGracePeriodSeconds": 0,
        },
    }
