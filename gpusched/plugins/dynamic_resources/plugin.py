"""DynamicResources (PreFilter): a pod with `spec.resourceClaims` is UnschedulableAndUnresolvable.

kube-scheduler's DynamicResources plugin allocates the pod's ResourceClaims from the
cluster's ResourceSlices before binding; without it a pod bound here would never start (the
kubelet waits for an allocation that no one makes) and every other scheduler would see the
devices as free. Until gpusched allocates claims itself, such a pod is refused at PreFilter
with a reason that says so and what to do, rather than bound to a node it cannot run on.
Nothing in the cluster can change that verdict, only the pod (and its claims are
immutable), so no cluster event wakes it (core/queue/hints.py).
"""

from __future__ import annotations

from typing import ClassVar

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import Handle, PreFilterResult
from gpusched.framework.status import Code, Status, skip
from gpusched.model.pod import PodInfo

NAME = "DynamicResources"


def reason(claims: tuple[str, ...]) -> str:
    listed = ", ".join(claims[:5]) + (", ..." if len(claims) > 5 else "")
    return (
        f"pod has resourceClaims ({listed}): gpusched does not allocate Dynamic Resource"
        " Allocation claims yet; schedule this pod with a scheduler that does (e.g. the"
        " default scheduler), or ask for GPUs with nvidia.com/gpu or gpusched.io/gpu-milli"
    )


class DynamicResources:
    name: ClassVar[str] = NAME

    def __init__(self, args: object, handle: Handle) -> None:
        self.handle = handle

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        if not pod.resource_claims:
            return None, skip()
        return None, Status(
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (reason(pod.resource_claims),), NAME
        )
