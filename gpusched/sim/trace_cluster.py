"""openb trace rows -> the scheduler's own objects (NodeModel, PodInfo).

The FGD simulator's view of the trace (``docs/fgd-protocol.md`` section 2) maps onto ours:

* a node gets ``cpu_milli``, ``memory_mib`` MiB, 1001 pod slots (the simulator's
  ``pods: 1001``) and ``gpu`` cards of its model. Cards get the model's memory (the trace
  has none): a shared pod then holds the same share of memory as of compute, which never
  binds before the compute share does, so only milli-GPU decides fit, as in the simulator;
* a pod is read through :func:`gpusched.sim.fgd_workload.pod_resource` (the simulator's
  clamps and clean-ups): ``num_gpu == 1`` with a share below 1000 is a shared pod
  (``gpu_milli``), any other GPU pod takes ``num_gpu`` whole cards, ``gpu_spec`` becomes
  the pod's acceptable models;
* racks are optional: ``rack_of`` names each node's rack (the replay mode adds them; the
  FGD protocol has none, so NetworkLocality has nothing to say there).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from gpusched.model import keys
from gpusched.model.gpu_models import canonical_models
from gpusched.model.node import Card, NodeModel
from gpusched.model.pod import PodInfo, PodRequest
from gpusched.sim.fgd_owners import Owner
from gpusched.sim.fgd_workload import MILLI, PodResource, WorkloadPod, pod_resource
from gpusched.sim.openb import TraceNode, TracePod

MIB = 1024**2
# The simulator's node template: allocatable pods 1001.
POD_SLOTS = 1001
# Card memory by model (MiB); only proportional shares use it (see the module docstring).
CARD_MEMORY_MIB: Mapping[str, int] = {
    "V100M16": 16384,
    "V100M32": 32768,
    "P100": 16384,
    "T4": 15360,
    "A10": 24576,
    "G2": 16384,
    "G3": 32768,
}
DEFAULT_CARD_MEMORY_MIB = 16384
MODEL_LABEL = "alibabacloud.com/gpu-card-model"
HOSTNAME_LABEL = "kubernetes.io/hostname"


def node_model(
    node: TraceNode,
    *,
    name: str | None = None,
    rack: str = "",
    spine: str = "",
) -> NodeModel:
    """A trace node as the scheduler's NodeModel (``name`` overrides the trace's sn)."""
    mem = CARD_MEMORY_MIB.get(node.model, DEFAULT_CARD_MEMORY_MIB)
    cards = tuple(Card(i, node.model, mem) for i in range(node.gpu))
    node_name = name or node.sn
    # The kubelet sets the hostname label on every node; PodTopologySpread's default
    # hostname constraint ignores a node without it.
    labels = {HOSTNAME_LABEL: node_name}
    if node.model:
        labels[MODEL_LABEL] = node.model
    if rack:
        labels[keys.RACK_LABEL] = rack
    return NodeModel(
        name=node_name,
        cpu_milli=node.cpu_milli,
        memory_bytes=node.memory_mib * MIB,
        pods=POD_SLOTS,
        cards=cards,
        labels=labels,
        rack=rack,
        spine=spine,
        gpu_source="inventory" if node.gpu else "none",
    )


def cluster_nodes(
    nodes: Sequence[TraceNode], rack_of: Callable[[int, TraceNode], str] | None = None
) -> list[NodeModel]:
    """The trace's nodes in file order, optionally racked by ``rack_of(index, node)``."""
    out = []
    for i, n in enumerate(nodes):
        rack = rack_of(i, n) if rack_of is not None else ""
        out.append(node_model(n, rack=rack))
    return out


def pod_request(res: PodResource, memory_mib: int) -> PodRequest:
    """The simulator's pod resource as our request (whole cards vs a share of one)."""
    # The daemon's pod parser's form (canonical names, each once: the trace has
    # `V100M16|V100M32|V100M32`), so the learnt shapes, and the placements, are the same.
    models = canonical_models(res.gpu_type.split("|")) if res.gpu_type else ()
    if res.gpu_number == 0 or res.milli_gpu == 0:
        # A GPU pod asking for 0 milli (clamped) holds no GPU in the simulator either.
        return PodRequest(cpu_milli=res.milli_cpu, memory_bytes=memory_mib * MIB)
    if res.is_gpu_share:
        return PodRequest(
            cpu_milli=res.milli_cpu,
            memory_bytes=memory_mib * MIB,
            gpu_milli=res.milli_gpu,
            gpu_models=models,
        )
    if res.milli_gpu != MILLI:
        # Multi-GPU pods with a partial share per GPU do not occur in the openb traces; the
        # simulator would pack them on cards with enough left, we round up to whole cards.
        pass
    return PodRequest(
        cpu_milli=res.milli_cpu,
        memory_bytes=memory_mib * MIB,
        gpu_cards=res.gpu_number,
        gpu_models=models,
    )


def pod_info(
    name: str,
    source: TracePod,
    *,
    uid: str | None = None,
    job_id: str = "",
    created: float = 0.0,
    scheduler_name: str = keys.SCHEDULER_NAME,
) -> PodInfo:
    res = pod_resource(source)
    labels = {keys.JOB_ID_LABEL: job_id} if job_id else {}
    return PodInfo(
        uid=uid or name,
        namespace="openb",
        name=name,
        request=pod_request(res, source.memory_mib),
        scheduler_name=scheduler_name,
        labels=labels,
        created=created,
        job_id=job_id,
    )


def workload_pods(
    pods: Sequence[WorkloadPod],
    scheduler_name: str = keys.SCHEDULER_NAME,
    owners: Sequence[Owner] | None = None,
) -> list[PodInfo]:
    """An FGD arrival sequence as pods (uid = the arrival's name, unique by construction),
    asking for `scheduler_name` (the measured profile: the simulator's queue, like the
    daemon's, only takes pods that name one of its profiles). With `owners` (one per pod,
    :mod:`gpusched.sim.fgd_owners`), each pod is its ReplicaSet's, as `pod_from_k8s` reads
    a pod whose controller ownerReference is that ReplicaSet."""
    out = [pod_info(p.name, p.source, scheduler_name=scheduler_name) for p in pods]
    if owners is None:
        return out
    if len(owners) != len(out):
        raise ValueError(f"{len(owners)} owners for {len(out)} pods")
    return [
        dataclasses.replace(
            pod,
            namespace=o.namespace,
            labels={**pod.labels, **o.labels},
            controller=("ReplicaSet", o.uid),
        )
        for pod, o in zip(out, owners, strict=True)
    ]
