"""NodeResourcesBalancedAllocation (PreScore, Score): kube-scheduler's balanced allocation.

For each node, the fraction of every configured resource that would be requested once the
pod is placed (pods already there + this pod, capped at 1); the score is
`(1 - std) * 100` of those fractions, truncated like Go's `int64(...)`: nodes whose
resources stay evenly used score high. Whole-cluster over the feasible rows, in the
same float64 operations and order as upstream's `balancedResourceScorer` (one numba
kernel, gpusched/kernels/balanced_allocation.py), so a score matches kube-scheduler's on the
same inputs, also at the truncation edges.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.cycle_state import CycleState, StateKey
from gpusched.framework.interfaces import Handle, Rows, Scores, ScoreUnit
from gpusched.framework.status import Code, Status
from gpusched.kernels import (
    balanced_cpu_mem_nb,
    balanced_cpu_mem_np,
    balanced_score_nb,
    balanced_score_np,
)
from gpusched.kernels.dispatch import pick
from gpusched.model.pod import PodInfo
from gpusched.plugins.helper.resources import allocatable_requested, pod_request_of
from gpusched.plugins.node_resources_balanced_allocation.args import (
    NodeResourcesBalancedAllocationArgs,
)

# The pod's request of each configured resource, in the args' order.
STATE: StateKey[tuple[int, ...]] = StateKey("NodeResourcesBalancedAllocation/requests")

I64 = NDArray[np.int64]

_balanced_score = pick(balanced_score_nb, balanced_score_np)
_balanced_cpu_mem = pick(balanced_cpu_mem_nb, balanced_cpu_mem_np)


def balanced_scores(alloc: I64, requested: I64) -> Scores:
    """Scores of m rows from `(k, m)` allocatable and requested amounts of k resources
    (gpusched/kernels/balanced_allocation.py)."""
    out = np.empty(alloc.shape[1], np.float64)
    _balanced_score(alloc, requested, out)
    return out


class NodeResourcesBalancedAllocation:
    name: ClassVar[str] = "NodeResourcesBalancedAllocation"
    score_unit: ClassVar[ScoreUnit] = ScoreUnit(
        "points (int, 0-100)",
        (
            "100 x (1 - std of the requested fractions of the node's resources after the pod): "
            "evenly used highest"
        ),
    )
    Args: ClassVar[type[NodeResourcesBalancedAllocationArgs]] = NodeResourcesBalancedAllocationArgs

    def __init__(self, args: NodeResourcesBalancedAllocationArgs | None, handle: Handle) -> None:
        self.args = args if args is not None else NodeResourcesBalancedAllocationArgs()
        self.handle = handle
        self.resources = tuple(r.name for r in self.args.resources)
        # The default resources, in either order, read straight from the snapshot's columns
        # (the two-fraction std is symmetric).
        self._cpu_mem = sorted(self.resources) == ["cpu", "memory"]

    def _requests(self, pod: PodInfo) -> tuple[int, ...]:
        return tuple(pod_request_of(pod.request, name) for name in self.resources)

    def pre_score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Status:
        requests = self._requests(pod)
        if not any(requests):
            # As upstream (kubernetes#129138): a best-effort pod changes no fraction, so the
            # score would only say which node is already most balanced and every such pod
            # would pile onto it; it is not scored here at all.
            return Status(Code.SKIP)
        state.write(STATE, requests)
        return Status()

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        requests = state.get(STATE)
        if requests is None:  # Score without PreScore (a profile that leaves PreScore out)
            requests = self._requests(pod)
            if not any(requests):
                return np.zeros(len(rows), np.float64)
        snap = self.handle.snapshot
        if self._cpu_mem:
            out = np.empty(len(rows), np.float64)
            by_name = dict(zip(self.resources, requests, strict=True))
            _balanced_cpu_mem(
                rows,
                snap.node_cpu_alloc,
                snap.node_cpu_free,
                snap.node_mem_alloc,
                snap.node_mem_free,
                by_name["cpu"],
                by_name["memory"],
                out,
            )
            return out
        k = len(self.resources)
        alloc = np.empty((k, len(rows)), np.int64)
        requested = np.empty((k, len(rows)), np.int64)
        for i, (name, amount) in enumerate(zip(self.resources, requests, strict=True)):
            alloc[i], requested[i] = allocatable_requested(snap, rows, name, amount)
        return balanced_scores(alloc, requested)
