"""The cluster model: nodes with their cards, pods with their requests."""

from gpusched.model.node import FULL_CARD_MILLI, Card, NodeModel, Taint, TopologyKeys, node_from_k8s
from gpusched.model.pod import Gang, GangAPI, GpuKind, NVLink, PodInfo, PodRequest, pod_from_k8s

__all__ = [
    "FULL_CARD_MILLI",
    "Card",
    "Gang",
    "GangAPI",
    "GpuKind",
    "NVLink",
    "NodeModel",
    "PodInfo",
    "PodRequest",
    "Taint",
    "TopologyKeys",
    "node_from_k8s",
    "pod_from_k8s",
]
