"""NodeUnschedulable (Filter): cordoned nodes take only pods that tolerate the cordon."""

from __future__ import annotations

from typing import ClassVar

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import FilterResult, Handle, Mask
from gpusched.model.pod import PodInfo
from gpusched.plugins.helper.tolerations import (
    TAINT_NODE_UNSCHEDULABLE,
    parse_tolerations,
    tolerated,
)

REASON = "node(s) were unschedulable"


class NodeUnschedulable:
    name: ClassVar[str] = "NodeUnschedulable"

    def __init__(self, args: object, handle: Handle) -> None:
        self.handle = handle

    def filter(self, state: CycleState, pod: PodInfo, candidates: Mask) -> FilterResult:
        snap = self.handle.snapshot
        if not snap.cordoned:
            return FilterResult(candidates)  # no node is cordoned: nothing to read per row
        cordoned = snap.node_unschedulable[: len(candidates)]
        # Same rule as kube-scheduler: tolerating the node.kubernetes.io/unschedulable
        # NoSchedule taint means tolerating spec.unschedulable too. Checked only when some
        # candidate is cordoned, so the common case costs one vector op.
        if not (candidates & cordoned).any() or (
            pod.tolerations
            and tolerated(parse_tolerations(pod.tolerations), TAINT_NODE_UNSCHEDULABLE)
        ):
            return FilterResult(candidates)
        return FilterResult(candidates & ~cordoned, (REASON,), unresolvable=True)
