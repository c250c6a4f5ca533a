"""The disruption port: PodDisruptionBudgets to respect, and the writes of preemption
(Handle.disruption).

Reads are synchronous (PostFilter runs in the scheduling cycle and never awaits); the
writes are coroutines the preemption plugin starts once it has chosen every victim, so the
choice is made on one consistent snapshot and the cluster is touched only after it.

What a preemption writes, in kube-scheduler's order (pkg/scheduler/framework/preemption):
for each victim, the `DisruptionTarget` condition (reason `PreemptionByScheduler`), then the
deletion, then a `Preempted` Event on the victim saying for whom and where; and the
preemptor's `status.nominatedNodeName`. The daemon implements it over the API server
(gpusched/kube/disruption.py), the simulator over its in-memory cluster, where a deleted
victim departs (and its lost work is counted).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gpusched.framework.status import Code, Status
from gpusched.model.pod import PodInfo


@dataclass(frozen=True, slots=True)
class Budget:
    """One PodDisruptionBudget as last seen: `disruptions_allowed` is its status's (the
    disruption controller's count); a budget whose status is not yet computed, or whose
    selector does not parse, allows none (`problem` says why)."""

    key: str  # "namespace/name"
    disruptions_allowed: int
    problem: str = ""


class DisruptionPort(Protocol):
    def budgets_of(self, pod: PodInfo) -> Sequence[Budget]:
        """The PodDisruptionBudgets of the pod's namespace whose selector matches the pod."""
        ...

    async def evict(
        self, victim: PodInfo, *, preemptor: PodInfo, node: str, message: str
    ) -> Status:
        """Preempt `victim` for `preemptor` (which will go to `node`): the DisruptionTarget
        condition with `message`, then delete the pod, then the Preempted Event. A victim
        already gone is a success."""
        ...

    async def nominate(self, pod: PodInfo, node: str) -> Status:
        """Set the pod's `status.nominatedNodeName` ("" clears it)."""
        ...


class _NoDisruption:
    """No budgets; preemption cannot write (a scheduler built without the port)."""

    def budgets_of(self, pod: PodInfo) -> Sequence[Budget]:
        return ()

    async def evict(
        self, victim: PodInfo, *, preemptor: PodInfo, node: str, message: str
    ) -> Status:
        return Status(Code.ERROR, ("this scheduler cannot evict pods (no disruption port)",))

    async def nominate(self, pod: PodInfo, node: str) -> Status:
        return Status()


NO_DISRUPTION: DisruptionPort = _NoDisruption()
