"""PrioritySort (QueueSort): higher priority first, then the older pod."""

from __future__ import annotations

from typing import ClassVar

from gpusched.framework.interfaces import Handle
from gpusched.model.pod import PodInfo


class PrioritySort:
    """kube-scheduler's PrioritySort: spec.priority descending, then the queue timestamp
    ascending. We order by the pod's creation time (the queue does not stamp pods), and
    break a remaining tie by namespace/name so two runs of the simulator pop pods in the
    same order."""

    name: ClassVar[str] = "PrioritySort"

    def __init__(self, args: object, handle: Handle) -> None:
        self.handle = handle

    def less(self, a: PodInfo, b: PodInfo) -> bool:
        if a.priority != b.priority:
            return a.priority > b.priority
        if a.created != b.created:
            return a.created < b.created
        return (a.namespace, a.name) < (b.namespace, b.name)
