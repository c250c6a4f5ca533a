"""openb trace rows as Dynamic Resource Allocation objects: the FGD protocol's DRA mode.

The annotation path (trace_cluster.py) gives a node `gpu` cards of its model and a pod a
GPU request. Here the same node has no cards of its own: it publishes one ResourceSlice
shaped as NVIDIA's DRA driver does (driver and pool ``gpu.nvidia.com`` / the node, devices
``gpu-<i>`` with ``type: gpu``, ``uuid``, ``productName`` = the trace's model, PCI
attributes, a ``memory`` capacity), and a GPU pod names one ResourceClaim of the
``gpu.nvidia.com`` DeviceClass the driver's chart ships:

* whole cards (``num_gpu`` N, or a multi-GPU pod's partial shares, which the annotation path
  also rounds up): ``exactly`` count N;
* a share of one card (``gpu_milli`` m < 1000): ``exactly`` count 1 with a ``memory``
  capacity request (consumable capacity, KEP-5075). So every device is made shareable as
  devcluster's ``shared_gpu_slices`` variant does (``allowMultipleAllocations`` and a
  ``memory`` requestPolicy in 1Mi steps); its default is the whole card, so a claim that
  names no memory takes all of it, as a whole-card claim must.
* a trace model constraint (``gpu_spec``) becomes a CEL selector on ``productName``.

The share: the trace's ``gpu_milli`` is relative (m/1000 of whichever card the pod lands
on) while a memory request is absolute, and the openb fleet mixes cards of different
memory (trace_cluster.CARD_MEMORY_MIB: T4 15 GiB, P100/G2/V100M16 16 GiB, A10 24 GiB,
G3/V100M32 32 GiB) under pods that name no model (all 3078 shared pods of the default
trace). No memory request is m/1000 of every card at once, so NVIDIA's shape cannot say
"m/1000 of any card" on such a fleet. Two shapes, chosen by `memory`:

* ``"uniform"`` (exact; the default): every card publishes the same memory
  (``UNIFORM_MEMORY_MIB``) and a share asks for ``floor(m * that / 1000)`` MiB, which the
  card model (model/share.py: milli = ceil(MiB * 1000 / card MiB)) reads back as exactly m
  and charges exactly the MiB the annotation path's share holds on a card of that memory.
  Only ``memory`` is not the model's: placement is decided by milli-GPU alone in both
  paths (a share's memory is proportional to its compute and never binds first).
* ``"model"`` (faithful memory, not exact): every card publishes its model's memory and a
  share asks for m/1000 of ``reference_mib``; on a card of another size it holds a larger
  or smaller share than the annotation path gives it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from gpusched.dra.cards import CardMap, card_map, charge_of
from gpusched.framework.dra import MemoryDra
from gpusched.model.dra import (
    PodClaim,
    ResourceClaim,
    device_class_from_k8s,
    resource_claim_from_k8s,
    resource_slice_from_k8s,
)
from gpusched.model.node import NodeModel
from gpusched.model.pod import PodInfo, PodRequest
from gpusched.sim.openb import TraceNode
from gpusched.sim.trace_cluster import CARD_MEMORY_MIB, DEFAULT_CARD_MEMORY_MIB, node_model

DRIVER = "gpu.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"
API_VERSION = "resource.k8s.io/v1"
CLAIM_REQUEST = "gpu"  # the claim's request name (and the pod's name for its claim)
UNIFORM_MEMORY_MIB = DEFAULT_CARD_MEMORY_MIB
MemoryShape = Literal["uniform", "model"]
MEMORY_SHAPES: tuple[MemoryShape, ...] = ("uniform", "model")
JSON = dict[str, Any]


def device_class() -> JSON:
    """The DeviceClass NVIDIA's chart ships for full GPUs."""
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": GPU_CLASS, "uid": "uid-deviceclass-gpu", "resourceVersion": "1"},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": f"device.driver == '{DRIVER}' &&"
                        f" device.attributes['{DRIVER}'].type == 'gpu'"
                    }
                }
            ],
            "extendedResourceName": "nvidia.com/gpu",
        },
    }


def card_memory_mib(model: str, memory: MemoryShape) -> int:
    if memory == "uniform":
        return UNIFORM_MEMORY_MIB
    return CARD_MEMORY_MIB.get(model, DEFAULT_CARD_MEMORY_MIB)


def node_slice(node: TraceNode, memory: MemoryShape = "uniform") -> JSON:
    """The node's pool as NVIDIA's driver publishes it (one slice, every GPU), its devices
    shareable by memory (see the module docstring)."""
    mib = card_memory_mib(node.model, memory)
    devices = []
    for i in range(node.gpu):
        devices.append(
            {
                "name": f"gpu-{i}",
                "attributes": {
                    "type": {"string": "gpu"},
                    "uuid": {
                        "string": "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node.sn}/{i}"))
                    },
                    "productName": {"string": node.model},
                    "brand": {"string": "Nvidia"},
                    "resource.kubernetes.io/pciBusID": {
                        "string": f"0000:{0x18 + 0x10 * i:02x}:00.0"
                    },
                    "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{0x10 * (i // 2):02x}"},
                },
                "capacity": {
                    "memory": {
                        "value": f"{mib}Mi",
                        # A claim that names no memory takes the whole card.
                        "requestPolicy": {
                            "default": f"{mib}Mi",
                            "validRange": {"min": "1Mi", "step": "1Mi"},
                        },
                    }
                },
                "allowMultipleAllocations": True,
            }
        )
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {
            "name": f"{node.sn}-{DRIVER}-trace",
            "uid": f"uid-slice-{node.sn}",
            "resourceVersion": "1",
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": node.sn,
            "pool": {"name": node.sn, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def dra_node(node: TraceNode) -> NodeModel:
    """The trace node without cards of its own: they come from its slice."""
    return replace(node_model(node), cards=(), gpu_source="none")


@dataclass(slots=True)
class DraFleet:
    """A trace's GPU nodes as DRA nodes, and the in-memory DRA state they publish to."""

    nodes: list[NodeModel]
    dra: MemoryDra
    memory: MemoryShape = "uniform"
    reference_mib: int = UNIFORM_MEMORY_MIB
    _maps: dict[str, CardMap] = field(default_factory=dict)

    def card_map(self, node: str) -> CardMap:
        got = self._maps.get(node)
        if got is None:
            got = self._maps[node] = card_map(node, self.dra.slices_for_node(node))
        return got


def dra_fleet(
    nodes: Sequence[TraceNode],
    memory: MemoryShape = "uniform",
    *,
    reference_mib: int = UNIFORM_MEMORY_MIB,
    now: Callable[[], str] | None = None,
) -> DraFleet:
    if memory not in MEMORY_SHAPES:
        raise ValueError(f"memory must be one of {', '.join(MEMORY_SHAPES)}, got {memory!r}")
    dra = MemoryDra() if now is None else MemoryDra(now)
    dra.put_class(device_class_from_k8s(device_class()))
    for n in nodes:
        if n.gpu > 0:
            dra.put_slice(resource_slice_from_k8s(node_slice(n, memory)))
    return DraFleet([dra_node(n) for n in nodes], dra, memory, reference_mib)


def share_mib(milli: int, card_mib: int) -> int:
    """The memory a share of `milli` asks for on cards of `card_mib`: rounded down, so the
    card model's milli = ceil(MiB * 1000 / card_mib) is `milli` again (module docstring)."""
    return milli * card_mib // 1000


def claim_for(pod: PodInfo, fleet: DraFleet) -> ResourceClaim | None:
    """The ResourceClaim standing for the pod's GPU request (None: it asks for none)."""
    req = pod.request
    if req.gpu_milli_total <= 0:
        return None
    exactly: JSON = {"deviceClassName": GPU_CLASS}
    if req.gpu_cards:
        exactly["count"] = req.gpu_cards
    else:
        exactly["count"] = 1
        exactly["capacity"] = {
            "requests": {"memory": f"{share_mib(req.gpu_milli, fleet.reference_mib)}Mi"}
        }
    if req.gpu_models:
        models = ", ".join(f"'{m}'" for m in req.gpu_models)
        exactly["selectors"] = [
            {"cel": {"expression": f"device.attributes['{DRIVER}'].productName in [{models}]"}}
        ]
    raw = {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {
            "name": f"{pod.name}-{CLAIM_REQUEST}",
            "namespace": pod.namespace,
            "uid": f"uid-claim-{pod.uid}",
            "resourceVersion": "1",
        },
        "spec": {"devices": {"requests": [{"name": CLAIM_REQUEST, "exactly": exactly}]}},
    }
    return resource_claim_from_k8s(raw)


def dra_pod(pod: PodInfo, claim: ResourceClaim | None) -> PodInfo:
    """The pod asking through its claim instead of a GPU request."""
    if claim is None:
        return pod
    request = PodRequest(cpu_milli=pod.request.cpu_milli, memory_bytes=pod.request.memory_bytes)
    return replace(
        pod,
        request=request,
        resource_claims=(CLAIM_REQUEST,),
        pod_claims=(PodClaim(CLAIM_REQUEST, claim=claim.name),),
    )


def placed_cards(
    fleet: DraFleet, claim: ResourceClaim | None
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(card indices, milli per card) the claim's allocation holds, as the cache charges them
    (dra/cards.py charge_of); empty if it has none."""
    if claim is None:
        return (), ()
    current = fleet.dra.claim(claim.namespace, claim.name)
    if current is None or current.allocation is None:
        return (), ()
    by_node: dict[str, list[tuple[Any, Mapping[str, Any]]]] = {}
    for r in current.allocation.results:
        by_node.setdefault(r.pool, []).append((r.device_id, r.consumed_capacity))
    cards: list[int] = []
    milli: list[int] = []
    for node, results in by_node.items():
        charge = charge_of(results, fleet.card_map(node))
        cards.extend(charge.cards)
        milli.extend(charge.milli)
    return tuple(cards), tuple(milli)


def drop_claim(fleet: DraFleet, claim: ResourceClaim | None) -> None:
    """The pod left without running (the protocol drops an unplaced pod): its claim, made
    for it and allocated to no one, is deleted with it."""
    if claim is None:
        return
    current = fleet.dra.watched.get((claim.namespace, claim.name))
    if current is None:
        return
    fleet.dra.remove_claim(current)
