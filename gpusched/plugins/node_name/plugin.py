"""NodeName (Filter): a pod with spec.nodeName fits only the node of that name."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import FilterResult, Handle, Mask
from gpusched.model.pod import PodInfo

REASON = "node(s) didn't match the requested node name"


class NodeName:
    name: ClassVar[str] = "NodeName"

    def __init__(self, args: object, handle: Handle) -> None:
        self.handle = handle

    def filter(self, state: CycleState, pod: PodInfo, candidates: Mask) -> FilterResult:
        if not pod.node_name:
            return FilterResult(candidates)
        row = self.handle.snapshot.row_of(pod.node_name)
        feasible = np.zeros_like(candidates)
        if 0 <= row < len(candidates):
            feasible[row] = candidates[row]
        return FilterResult(feasible, (REASON,), unresolvable=True)
