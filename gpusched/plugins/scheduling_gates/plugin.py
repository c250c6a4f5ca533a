"""SchedulingGates (PreEnqueue): a pod with a non-empty spec.schedulingGates is not attempted."""

from __future__ import annotations

from typing import ClassVar

from gpusched.framework.interfaces import Handle
from gpusched.framework.status import SUCCESS, Status, unresolvable
from gpusched.model.pod import PodInfo


def gates_message(gates: tuple[str, ...]) -> str:
    """kube-scheduler's wording: fmt's %v of the gate names, "[a b]"."""
    return f"waiting for scheduling gates: [{' '.join(gates)}]"


class SchedulingGates:
    name: ClassVar[str] = "SchedulingGates"

    def __init__(self, args: object, handle: Handle) -> None:
        self.handle = handle

    def pre_enqueue(self, pod: PodInfo) -> Status:
        if not pod.scheduling_gates:
            return SUCCESS
        return unresolvable(gates_message(pod.scheduling_gates))
