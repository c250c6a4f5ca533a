"""Per-row allocatable and requested amounts of one resource, over the snapshot's columns.

kube-scheduler's `resourceAllocationScorer.calculateResourceAllocatableRequest`, shared by
NodeResourcesFit's scoring strategies and NodeResourcesBalancedAllocation, whole-cluster:
one array per resource over the rows asked for. A row's requested amount is what its pods
already use (the snapshot's `alloc - free`, kube's `NodeInfo.Requested`) plus the pod's
request. An allocatable of 0 on a row means "leave this resource out on this row".
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.interfaces import Rows
from gpusched.framework.snapshot import NO_CARD, NodeColumns
from gpusched.model.keys import GPU_RESOURCE
from gpusched.model.node import FULL_CARD_MILLI
from gpusched.model.pod import PodRequest

I64 = NDArray[np.int64]

CPU = "cpu"
MEMORY = "memory"
# Resources kube's IsScalarResourceName says no to: they are scored even when the pod does
# not request them. Every other name (extended resources, hugepages-*, attachable volumes,
# *kubernetes.io/*) is scalar: a pod that does not request it does not score it.
_NOT_SCALAR = frozenset((CPU, MEMORY, "ephemeral-storage", "pods", "storage"))


def is_scalar_resource(name: str) -> bool:
    return name not in _NOT_SCALAR


def pod_request_of(req: PodRequest, name: str) -> int:
    """What the pod requests of `name` (exact requests, no non-zero defaults): cpu in
    millicores, memory and storage in bytes, `nvidia.com/gpu` in whole cards, extended
    resources as counts."""
    if name == CPU:
        return req.cpu_milli
    if name == MEMORY:
        return req.memory_bytes
    if name == GPU_RESOURCE:
        return req.gpu_cards
    for other, amount in req.other:
        if other == name:
            return amount
    return 0


def allocatable_requested(
    snap: NodeColumns, rows: Rows, name: str, pod_request: int
) -> tuple[I64, I64]:
    """(allocatable, requested after placing the pod) of `name` on each of `rows`.

    `nvidia.com/gpu` is counted in whole cards, as the device plugin's extended resource:
    allocatable = the node's cards, requested = cards no longer intact (a whole-card pod or
    any share of a shared pod sits on them) + `pod_request`. Other names are read from the
    snapshot's other-resource columns; a name no node offers has allocatable 0 everywhere.
    """
    if name == CPU:
        alloc = snap.node_cpu_alloc[rows]
        return alloc, alloc - snap.node_cpu_free[rows] + pod_request
    if name == MEMORY:
        alloc = snap.node_mem_alloc[rows]
        return alloc, alloc - snap.node_mem_free[rows] + pod_request
    if pod_request == 0 and is_scalar_resource(name):
        # kube returns (0, 0) for an extended resource the pod does not request.
        zero = np.zeros(len(rows), np.int64)
        return zero, zero
    if name == GPU_RESOURCE:
        alloc = snap.node_card_count[rows].astype(np.int64)
        has = snap.card_model[rows] != NO_CARD
        used = np.count_nonzero(has & (snap.card_free_milli[rows] < FULL_CARD_MILLI), axis=1)
        return alloc, used.astype(np.int64) + pod_request
    col = snap.other_column(name)
    if col < 0:
        zero = np.zeros(len(rows), np.int64)
        return zero, zero
    alloc = snap.node_other_alloc[rows, col]
    return alloc, alloc - snap.node_other_free[rows, col] + pod_request
